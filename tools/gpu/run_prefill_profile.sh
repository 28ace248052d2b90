#!/usr/bin/env bash
# GPU machine: where a prefill forward's device time goes. Builds bench/v4_model_bench and runs one
# prompt of the real V4-Flash geometry (dummy weights, N layers) under the CUPTI kernel tracer
# (tools/gpu/kernel_trace.cpp) for each run MIN_ROWS:KERNEL given (--moe-prefill-min-rows: 32 = the
# prefill expert GEMM from 32 rows per expert, the default, 0 = routed experts on the skinny FP8 path;
# KERNEL: fp8, the default (moe_prefill_fp8_wgmma.cu), wgmma (the bf16 one) or mma), then prints the top
# kernels of the longest prompt
# (tools/gpu/prefill_trace_report.py) and its GEMMs against the tensor-core peaks
# (tools/gpu/prefill_gemm_report.py). Logs and gzipped traces in $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_prefill_profile.sh [--layers 4] [--tokens 1024,8192]
#        [--runs "32:fp8 0:fp8"] [--no-build]
set -uo pipefail
cd "$(dirname "$0")/../.."
layers=4 tokens=1024,8192 runs="32:fp8 0:fp8" build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "run_prefill_profile.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/profile_out}"
mkdir -p "$out"
if [ "$build" = 1 ] && ! bash tools/gpu/build.sh v4_model_bench >"$out/build_profile.log" 2>&1; then
  tail -40 "$out/build_profile.log"; exit 1
fi
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log" || exit 1
for run in $runs; do
  m="${run%%:*}" k="${run##*:}" tag="m${run%%:*}_${run##*:}"
  case "$k" in
    fp8) flags="--moe-prefill-fp8 1" ;;
    wgmma) flags="--moe-prefill-fp8 0 --moe-prefill-wgmma 1" ;;
    *) flags="--moe-prefill-fp8 0 --moe-prefill-wgmma 0" ;;
  esac
  echo "## prefill $tokens tokens, $layers layers, --moe-prefill-min-rows $m $flags"
  timeout 240 env KERNEL_TRACE_OUT="$out/prefill_trace_$tag.csv" LD_PRELOAD=/tmp/kernel_trace.so \
    build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers "$layers" \
    --prefill "$tokens" --batches 1 --contexts 16 --steps 1 --moe-prefill-min-rows "$m" $flags \
    >"$out/prefill_bench_$tag.md" 2>&1
  grep -E "^\| *(${tokens//,/|}) *\|" "$out/prefill_bench_$tag.md"
  python3 tools/gpu/prefill_trace_report.py "$out/prefill_trace_$tag.csv" 2>&1
  python3 tools/gpu/prefill_gemm_report.py "$out/prefill_trace_$tag.csv" --config tests/io/fixtures/v4_flash.release.json \
    --layers "$layers" --tokens "${tokens##*,}" 2>&1
  gzip -f "$out/prefill_trace_$tag.csv"
done
