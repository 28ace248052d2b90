#!/usr/bin/env bash
# GPU machine: the routed-expert kernels (src/ops/cuda/moe_fp4_kernels.cu, moe_kernels.cu). Builds, runs
# the MoE op-parity tests, `ops_cuda_bench --moe` (every fp4 expert path, T = 1..512) and
# `ops_cuda_bench --moe-trace` under the CUPTI tracer (per-kernel time of one call, default vs the
# mma.sync kernel); with --final also cuda_golden_test and v4_model_bench decode at batches 1, 32, 128.
# usage (repo root, .deps carried): bash tools/gpu/run_moe_experts.sh [--final] [--no-trace]
set -uo pipefail
cd "$(dirname "$0")/../.."
final=0 trace=1
while [ $# -gt 0 ]; do
  case "$1" in
    --final) final=1 ;;
    --no-trace) trace=0 ;;
    *) echo "run_moe_experts.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out="${OUT:-/tmp/moe_out}"
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv >"$out/gpu.txt" 2>&1
targets="ops_cuda_parity_test ops_cuda_bench"
[ "$final" = 1 ] && targets="$targets cuda_golden_test v4_model_bench"
if ! bash tools/gpu/build.sh $targets >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30; echo "build failed"; exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 60 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='*Moe*' >"$out/parity.log" 2>&1
parity=$?
stamp "parity *Moe*: exit $parity"
grep -E "^\[  (FAILED|PASSED|  OK) |Failure|relative error|Which is" "$out/parity.log" | head -40
[ $parity = 0 ] || final=0  # no model-level runs on a failing op
timeout 90 build/gpu/bench/ops_cuda_bench --moe >"$out/bench_moe.md" 2>&1
stamp "ops_cuda_bench --moe: exit $?"
grep -E "^\|" "$out/bench_moe.md"
if [ "$trace" = 1 ]; then
  if bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log"; then
    timeout 120 env KERNEL_TRACE_OUT=/tmp/moe_trace.csv LD_PRELOAD=/tmp/kernel_trace.so \
      build/gpu/bench/ops_cuda_bench --moe-trace >"$out/bench_trace.md" 2>&1
    stamp "ops_cuda_bench --moe-trace: exit $?"
    labels=""
    for t in 1 8 32 128 256; do labels="$labels${labels:+,}$t:default,$t:mma.sync"; done
    python3 tools/gpu/moe_trace_report.py /tmp/moe_trace.csv --labels "$labels" | tee "$out/kernels.md"
  fi
fi
if [ "$final" = 1 ]; then
  golden=$(find build/gpu/tests -name cuda_golden_test -type f -perm -u+x | head -1)
  timeout 90 "$golden" >"$out/cuda_golden_test.log" 2>&1
  status=$?
  stamp "cuda_golden_test: exit $status, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/cuda_golden_test.log" |
    tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$out/cuda_golden_test.log" | head -20
  timeout 90 build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers 4 \
    --prefill 16 --batches 1,32,128 --contexts 1024 --steps 4 >"$out/model_bench.md" 2>&1
  stamp "v4_model_bench: exit $?"
  grep -E "^\||Ceilings" "$out/model_bench.md"
fi
stamp done
