#!/usr/bin/env bash
# Device run for the engine loop and device sampling: builds, checks the CUDA sampling op against
# the CPU reference (every cluster split, tokens and logprob bits) and times it, checks the engine on
# the V4 model launched ahead against the loops that wait for the host (engine_cuda_test), times the model's
# own graph-replayed decode step (v4_model_bench) at the same batches, then runs engine_bench on
# dummy V4-Flash weights at batch 1 and 32 — top-k 50 + top-p 0.95 at temperature 1 with the next
# step launched ahead and without (collected first), and greedy launched ahead — under the CUPTI
# kernel tracer, reporting GPU busy / idle per decode step (tools/gpu/engine_trace_gaps.py) and each
# run's output digest (launched ahead or not, the same requests must give the same tokens).
# usage (device, repo root, carrying .deps): [LAYERS=4] [PROMPT=512] [OUTPUT=32] [MODEL_BENCH=0]
#   bash tools/gpu/run_engine_bench.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out/logs"
logs="$out/logs"
layers="${LAYERS:-4}"
prompt="${PROMPT:-512}"
output="${OUTPUT:-32}"
config=tests/io/fixtures/v4_flash.release.json
stamp() { echo "== $* ($(date +%T))"; }
finish() {
  tar -czf "$out/engine_bench_logs.tgz" -C "$logs" . 2>/dev/null
  stamp done
}
trap finish EXIT
stamp build
if ! bash tools/gpu/build.sh ops_cuda_parity_test engine_cuda_test engine_bench v4_model_bench >"$logs/build.log" 2>&1; then
  tail -40 "$logs/build.log"
  exit 1
fi
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"

stamp "sampling parity + timing"
timeout 90 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='CudaSampling*' >"$logs/sampling_parity.log" 2>&1
echo "exit status $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED|       OK) |Failure|Expected|Which is|word|device sampling" "$logs/sampling_parity.log" | head -40

stamp "engine on the V4 model: launched ahead == collected first == synchronous host sampling"
timeout 90 build/gpu/tests/engine/engine_cuda_test >"$logs/engine_cuda_test.log" 2>&1
echo "exit status $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" "$logs/engine_cuda_test.log" | head -20

if [ "${MODEL_BENCH:-1}" = 1 ]; then
  stamp "model decode step (v4_model_bench, graphs)"
  timeout 90 build/gpu/bench/v4_model_bench --config "$config" --num-layers "$layers" --prefill 128 --batches 1,32 \
    --contexts "$((prompt + output))" --steps 8 >"$logs/v4_model_bench.md" 2>&1
  echo "exit status $?"
  grep -E "^\| *(1|32) *\|" "$logs/v4_model_bench.md" | head -6
fi

preload=""
if bash tools/gpu/build_kernel_trace.sh "$logs/trace_build.log" >/dev/null 2>&1; then
  preload=/tmp/kernel_trace.so
else
  echo "no CUPTI tracer: host numbers only"
fi

run() {  # name, engine_bench flags and arguments...
  local name="$1"; shift
  stamp "engine_bench $name"
  timeout 60 env KERNEL_TRACE_OUT="$logs/trace_$name.csv" LD_PRELOAD="$preload" build/gpu/bench/engine_bench \
    --dummy "$config" --layers "$layers" --device cuda "$@" >"$logs/engine_$name.txt" 2>&1
  echo "exit status $?"
  grep -E "loop|launched ahead|digest|engine .*ms/step" "$logs/engine_$name.txt"
  if [ -f "$logs/trace_$name.csv" ]; then
    python3 tools/gpu/engine_trace_gaps.py "$logs/trace_$name.csv" --steps 8 2>&1 | tail -3 | tee "$logs/gaps_$name.txt"
    gzip -f "$logs/trace_$name.csv"
  fi
}
filtered=(--top-k 50 --top-p 0.95)
run b1_filtered_ahead "${filtered[@]}" --ahead on 1 "$prompt" "$output" 129280 1 1
run b1_filtered_collected "${filtered[@]}" --ahead off 1 "$prompt" "$output" 129280 1 1
run b1_greedy_ahead --ahead on 1 "$prompt" "$output" 129280 0 1
run b32_filtered_ahead "${filtered[@]}" --ahead on 32 "$prompt" "$output" 129280 1 32
run b32_filtered_collected "${filtered[@]}" --ahead off 32 "$prompt" "$output" 129280 1 32
run b32_greedy_ahead --ahead on 32 "$prompt" "$output" 129280 0 32
