#!/usr/bin/env bash
# GPU machine: CUDA graph checks and the eager decode overhead they are meant to remove. Builds
# ops_cuda_graph_test and v4_model_bench, runs the graph tests (bit-for-bit replay vs eager, capture
# safety, replay vs eager launch cost), then times V4 decode at batch 1 on dummy weights of the
# real geometry under tools/gpu/kernel_trace.cpp (CUPTI) and reports GPU busy time vs wall time
# per step. Logs in $OUT (or /tmp/graphs_out).
# usage (repo root, .deps carried): bash tools/gpu/run_graphs.sh [--layers 1] [--steps 10] [--context 128]
set -uo pipefail
cd "$(dirname "$0")/../.."
layers=1 steps=10 context=128
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    *) echo "run_graphs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/graphs_out}"
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[run_graphs +$(( $(date +%s) - start ))s] $*"; }

stamp build
if ! bash tools/gpu/build.sh ops_cuda_graph_test v4_model_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
stamp graph tests
timeout 120 build/gpu/tests/ops/ops_cuda_graph_test 2>&1 | tee "$out/graph_test.log" | grep -E "GRAPH_COST|FAILED|Failure|error|PASSED|SKIPPED" | head -40

stamp kernel trace tool
# CUPTI: the toolkit's extras, else the pip wheels next to PyTorch (nvidia/cu13 or nvidia/cuda_cupti),
# else whatever cupti.h a search of /opt and /usr/local finds.
cands="/usr/local/cuda/extras/CUPTI /usr/local/cuda"
for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  cands="$cands $sp/nvidia/cu13 $sp/nvidia/cuda_cupti"
done
found=$(find /opt /usr/local -name cupti.h -path '*include*' 2>/dev/null | head -1)
[ -n "$found" ] && cands="$cands $(dirname "$(dirname "$found")")"
cupti=""
for d in $cands; do
  if [ -f "$d/include/cupti.h" ]; then cupti="$d"; break; fi
done
libdir=""
for l in "$cupti/lib64" "$cupti/lib"; do
  if ls "$l"/libcupti.so* >/dev/null 2>&1; then libdir="$l"; break; fi
done
lib=$(ls "$libdir"/libcupti.so* 2>/dev/null | head -1)
if [ -z "$cupti" ] || [ -z "$lib" ] ||
   ! g++ -O2 -shared -fPIC tools/gpu/kernel_trace.cpp -I"$cupti/include" -I/usr/local/cuda/include "$lib" \
       -Wl,-rpath,"$libdir" -o /tmp/kernel_trace.so 2>"$out/trace_build.log"; then
  echo "kernel_trace: no CUPTI found or build failed (cupti='$cupti' lib='$lib')"; cat "$out/trace_build.log"
  preload=""
else
  preload=/tmp/kernel_trace.so
fi

stamp "decode bench ($layers layers, context $context, $steps steps)"
# LD_PRELOAD through env: only the bench loads the tracer (not timeout or tee, whose exit would
# overwrite the trace).
timeout 150 env KERNEL_TRACE_OUT="$out/trace.csv" LD_PRELOAD="$preload" build/gpu/bench/v4_model_bench \
  --config tests/io/fixtures/v4_flash.release.json --num-layers "$layers" --prefill 16 --batches 1 \
  --contexts "$context" --steps "$steps" 2>&1 | tee "$out/bench.md"
wall=$(awk -F'|' -v c="$context" '$2 + 0 == 1 && $3 + 0 == c { gsub(/ /, "", $4); print $4 }' "$out/bench.md" | tail -1)
if [ -f "$out/trace.csv" ]; then
  stamp "trace report (wall $wall ms per step)"
  python3 tools/gpu/kernel_trace_report.py "$out/trace.csv" --steps "$steps" ${wall:+--wall-ms "$wall"} |
    tee "$out/trace_report.txt"
  gzip -f "$out/trace.csv"
fi
stamp done
