#!/usr/bin/env bash
# GPU machine: builds the CUPTI kernel tracer (tools/gpu/kernel_trace.cpp) into /tmp/kernel_trace.so
# (LD_PRELOAD it with KERNEL_TRACE_OUT=trace.csv). CUPTI comes from the toolkit's extras, else the pip
# wheels next to PyTorch. usage (repo root): bash tools/gpu/build_kernel_trace.sh [LOG]
set -uo pipefail
cd "$(dirname "$0")/../.."
log="${1:-/tmp/trace_build.log}"
cupti=""
for d in /usr/local/cuda/extras/CUPTI /usr/local/cuda $(python3 -c 'import site; print(" ".join(p + "/nvidia/cu13 " + p + "/nvidia/cuda_cupti" for p in site.getsitepackages()))' 2>/dev/null); do
  if [ -f "$d/include/cupti.h" ]; then cupti="$d"; break; fi
done
lib=$(ls "$cupti"/lib64/libcupti.so* "$cupti"/lib/libcupti.so* 2>/dev/null | head -1)
g++ -O2 -shared -fPIC tools/gpu/kernel_trace.cpp -I"$cupti/include" -I/usr/local/cuda/include "$lib" \
  -Wl,-rpath,"$(dirname "$lib")" -o /tmp/kernel_trace.so 2>"$log" ||
  { echo "kernel_trace build failed (cupti: '$cupti', lib: '$lib')"; cat "$log"; exit 1; }
