#!/usr/bin/env bash
# GPU machine, one call for the decode step's small kernels (mHC, norms, row, indexer and top-k
# kernels): builds the op-parity suite, bench/small_ops_bench and v4_model_bench (with --golden also
# cuda_golden_test and the CUDA graph tests), runs the parity tests matching --filter, times each
# small op alone (small_ops_bench at the --batches token counts), then decode steps of the real
# V4-Flash geometry (dummy weights, N layers, graphs) at every --batches size in ONE bench process
# under the CUPTI tracer (tools/gpu/kernel_trace.cpp); tools/gpu/trace_phases.py prints each batch
# size's kernels per step. Logs and the trace in $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_small_kernels.sh [--filter 'CudaParity.*'] [--golden]
#        [--layers 4] [--batches 1,32] [--context 1024]
set -uo pipefail
cd "$(dirname "$0")/../.."
filter='CudaParity.*' golden=0 layers=4 batches=1,32 context=1024 steps=6
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) filter="$2"; shift 2 ;;
    --golden) golden=1; shift ;;
    --layers) layers="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    *) echo "run_small_kernels.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/small_kernels}"
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
tests="ops_cuda_parity_test"
[ "$golden" = 1 ] && tests="$tests ops_cuda_graph_test cuda_golden_test"
if ! bash tools/gpu/build.sh $tests v4_model_bench small_ops_bench >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30; exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
for t in $tests; do
  bin=$(find build/gpu/tests -name "$t" -type f -perm -u+x | head -1)
  f=""
  [ "$t" = ops_cuda_parity_test ] && f="--gtest_filter=$filter"
  timeout 200 "$bin" $f >"$out/$t.log" 2>&1
  stamp "$t: exit $?, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]|Failure|relative error" "$out/$t.log" | head -20
done
# Each small op alone (graph replays), with the variants that isolate a fused op's stages.
timeout 100 build/gpu/bench/small_ops_bench --tokens "$batches" >"$out/small_ops.md" 2>"$out/small_ops.log"
stamp "small_ops_bench: exit $?"
cat "$out/small_ops.md"
bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log" || exit 1
timeout 200 env KERNEL_TRACE_OUT="$out/trace.csv" LD_PRELOAD=/tmp/kernel_trace.so build/gpu/bench/v4_model_bench \
  --config tests/io/fixtures/v4_flash.release.json --num-layers "$layers" --prefill 16 --batches "$batches" \
  --contexts "$context" --steps "$steps" >"$out/bench.md" 2>&1
stamp "bench: exit $?"
grep -E "^\| *[0-9]+ *\| *$context|Ceilings" "$out/bench.md"
python3 tools/gpu/trace_phases.py "$out/trace.csv" --steps "$steps" --top 30 | tee "$out/phases.md"
gzip -f "$out/trace.csv"
stamp done
