#!/usr/bin/env bash
# GPU machine, one call: the routed experts' fp8 prefill GEMM (moe_prefill_fp8_wgmma.cu). Builds
# ops_cuda_parity_test and v4_model_bench, runs the MoE parity tests (the fp8 and bf16 prefill GEMMs, the
# skinny decode paths it shares the pipeline with), the 4-layer V4-Flash prefill bench with the fp8 GEMM
# off and on, a CUPTI trace of each 8K prompt (the GEMM's own time: tools/gpu/prefill_trace_report.py)
# and compute-sanitizer memcheck over one fp8 parity test (every scale form, both token halves). Logs in
# $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_prefill_fp8.sh [--no-trace] [--no-memcheck]
set -uo pipefail
cd "$(dirname "$0")/../.."
trace=1 memcheck=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-trace) trace=0 ;;
    --no-memcheck) memcheck=0 ;;
    *) echo "run_prefill_fp8.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out="${OUT:-/tmp/prefill_fp8_out}"
mkdir -p "$out"
start=$(date +%s)
if ! bash tools/gpu/build.sh ops_cuda_parity_test v4_model_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 240 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='CudaParity.Moe*' >"$out/parity.log" 2>&1
echo "parity rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/parity.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|error' "$out/parity.log" | head -20
echo "parity: $(( $(date +%s) - start )) s"
bench=(build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers 4)
for fp8 in 0 1; do
  echo "## --moe-prefill-fp8 $fp8"
  timeout 150 "${bench[@]}" --prefill 1024,8192 --batches 1 --contexts 1024 --steps 2 --moe-prefill-fp8 "$fp8" \
    >"$out/bench_fp8_$fp8.md" 2>&1
  grep -E '^\| *(1024|8192) *\|' "$out/bench_fp8_$fp8.md"
done
echo "bench: $(( $(date +%s) - start )) s"
if [ "$trace" = 1 ] && bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log"; then
  for fp8 in 1 0; do
    echo "## trace, 8K prompt, --moe-prefill-fp8 $fp8"
    timeout 120 env KERNEL_TRACE_OUT="$out/trace_fp8_$fp8.csv" LD_PRELOAD=/tmp/kernel_trace.so \
      "${bench[@]}" --prefill 8192 --batches 1 --contexts 16 --steps 1 --moe-prefill-fp8 "$fp8" >/dev/null 2>&1
    python3 tools/gpu/prefill_trace_report.py "$out/trace_fp8_$fp8.csv" --top 12 2>&1
    gzip -f "$out/trace_fp8_$fp8.csv"
  done
  echo "trace: $(( $(date +%s) - start )) s"
fi
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [ "$memcheck" = 1 ] && [ -x "$sanitizer" ]; then
  timeout 90 "$sanitizer" --tool memcheck build/gpu/tests/ops/ops_cuda_parity_test \
    --gtest_filter='CudaParity.MoePrefillFp8GemmGivesATokenTheSameBitsAloneAndInABatch' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
  echo "memcheck: $(( $(date +%s) - start )) s"
fi
