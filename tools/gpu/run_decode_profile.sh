#!/usr/bin/env bash
# GPU machine: where a decode step's device time goes. Builds bench/v4_model_bench and runs decode
# steps of the real V4-Flash geometry (dummy weights, N layers) at each given batch under the CUPTI
# kernel tracer (tools/gpu/kernel_trace.cpp), then prints per batch the busy/idle split and the top
# kernels per step (tools/gpu/kernel_trace_report.py). Logs in $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_decode_profile.sh [--layers 4] [--context 1024] [--batches "1 32"]
set -uo pipefail
cd "$(dirname "$0")/../.."
layers=4 context=1024 batches="1 32" steps=6
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    *) echo "run_decode_profile.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/profile_out}"
mkdir -p "$out"
if ! bash tools/gpu/build.sh v4_model_bench >"$out/build.log" 2>&1; then tail -40 "$out/build.log"; exit 1; fi
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log" || exit 1
for b in $batches; do
  echo "## batch $b, context $context, $layers layers"
  timeout 120 env KERNEL_TRACE_OUT="$out/trace_b$b.csv" LD_PRELOAD=/tmp/kernel_trace.so build/gpu/bench/v4_model_bench \
    --config tests/io/fixtures/v4_flash.release.json --num-layers "$layers" --prefill 16 --batches "$b" \
    --contexts "$context" --steps "$steps" >"$out/bench_b$b.md" 2>&1
  grep -E "^\| *$b *\|" "$out/bench_b$b.md" | tail -2
  python3 tools/gpu/kernel_trace_report.py "$out/trace_b$b.csv" --steps "$steps" 2>&1 | head -20
  gzip -f "$out/trace_b$b.csv"
done
