#!/usr/bin/env bash
# Device run for GPU sampling and the overlapped engine loop: builds, checks the CUDA sampling op
# against the CPU reference (tokens and logprob bits) and times it, then runs engine_bench on dummy
# V4-Flash weights twice — synchronous loop with host sampling (the old path: logits copied back)
# and overlapped loop with device sampling — under the CUPTI kernel tracer (tools/gpu/kernel_trace.cpp)
# when it builds, reporting GPU busy and idle time per decode step (tools/gpu/engine_trace_gaps.py).
# usage (device, repo root, carrying .deps): LAYERS=2 bash tools/gpu/run_engine_bench.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out"
layers="${LAYERS:-2}"
stamp() { echo "== $* ($(date +%T))"; }
stamp build
if ! bash tools/gpu/build.sh ops_cuda_parity_test engine_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
stamp "sampling parity"
timeout 120 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='CudaSampling*' >"$out/sampling_parity.log" 2>&1
echo "exit status $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED|       OK) |Failure|Expected|Which is|word|device sampling" "$out/sampling_parity.log" | head -40

stamp "kernel trace tool"
cupti=""
for d in /usr/local/cuda/extras/CUPTI /usr/local/cuda $(python3 -c 'import site; print(" ".join(p + "/nvidia/cu13 " + p + "/nvidia/cuda_cupti" for p in site.getsitepackages()))' 2>/dev/null); do
  if [ -f "$d/include/cupti.h" ]; then cupti="$d"; break; fi
done
lib=$(ls "$cupti"/lib64/libcupti.so* "$cupti"/lib/libcupti.so* 2>/dev/null | head -1)
preload=""
if [ -n "$cupti" ] && [ -n "$lib" ] && g++ -O2 -shared -fPIC tools/gpu/kernel_trace.cpp -I"$cupti/include" \
     -I/usr/local/cuda/include "$lib" -Wl,-rpath,"$(dirname "$lib")" -o /tmp/kernel_trace.so 2>"$out/trace_build.log"; then
  preload=/tmp/kernel_trace.so
else
  echo "no CUPTI tracer (cupti='$cupti' lib='$lib'): host numbers only"
fi

run() {  # name, engine_bench flags...
  local name="$1"; shift
  stamp "engine_bench $name"
  timeout 150 env KERNEL_TRACE_OUT="$out/trace_$name.csv" LD_PRELOAD="$preload" build/gpu/bench/engine_bench \
    --dummy tests/io/fixtures/v4_flash.release.json --layers "$layers" --device cuda "$@" 32 64 24 129280 1 32 \
    >"$out/engine_$name.txt" 2>&1
  echo "exit status $?"
  cat "$out/engine_$name.txt" | tail -8
  local wall
  wall=$(sed -n 's/.*last [0-9]* steps \([0-9.]*\) ms\/step wall.*/\1/p' "$out/engine_$name.txt")
  if [ -f "$out/trace_$name.csv" ]; then
    python3 tools/gpu/engine_trace_gaps.py "$out/trace_$name.csv" --steps 8 2>&1 | tee "$out/trace_$name.txt"
    echo "(host wall per step ${wall:-?} ms)"
    gzip -f "$out/trace_$name.csv"
  fi
}
run sync_host --overlap off --host-sampling
run overlap_device --overlap on
stamp done
