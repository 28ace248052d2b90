#!/usr/bin/env bash
# One device call for the V4.1 decode graphs and the shared graph cache: builds once, then (1) cuda_golden_test's
# graph replay == eager cases (V4 and V4.1) and the V4.1 logits vs HF / CPU (decode now bucketed), (2) the CUDA
# graph tests, (3) the V4.1 model bench (real geometry cut to --num-layers, dummy weights made on the device,
# Engram tables capped, eager vs graph-replayed decode). Logs in $OUT (build.log, golden.log, graph.log, bench_v41.md).
# usage (device, repo root, .deps carried): bash tools/gpu/run_v41.sh [v4_model_bench flags...]
#   or: bash tools/gpu/run_v41.sh --profile "1 32" [--layers 4]: V4.1 decode steps (1K context, graphs) under the
#   CUPTI kernel tracer instead, top kernels per step (as run_decode_profile.sh does for V4); traces in $OUT/traces.tar.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out"
if [ "${1:-}" = "--profile" ]; then
  batches="$2" layers="${4:-4}" steps=6
  if ! bash tools/gpu/build.sh v4_model_bench >"$out/build.log" 2>&1; then tail -40 "$out/build.log"; exit 1; fi
  export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log" || exit 1
  for b in $batches; do
    echo "## V4.1 batch $b, context 1024, $layers layers"
    timeout 100 env KERNEL_TRACE_OUT="$out/trace_v41_b$b.csv" LD_PRELOAD=/tmp/kernel_trace.so build/gpu/bench/v4_model_bench \
      --config tests/io/fixtures/v41_flash.release.json --num-layers "$layers" --prefill 16 --batches "$b" \
      --contexts 1024 --steps "$steps" >"$out/bench_v41_b$b.md" 2>&1
    grep -E "^\| *$b *\|" "$out/bench_v41_b$b.md" | tail -2
    python3 tools/gpu/kernel_trace_report.py "$out/trace_v41_b$b.csv" --steps "$steps" --top 16 2>&1 | head -40
    gzip -f "$out/trace_v41_b$b.csv"
  done
  tar -cf "$out/traces.tar" -C "$out" $(cd "$out" && ls trace_v41_b*.csv.gz) && rm -f "$out"/trace_v41_b*.csv.gz
  exit 0
fi
start=$(date +%s)
if ! bash tools/gpu/build.sh cuda_golden_test ops_cuda_graph_test v4_model_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "run_v41.sh: build failed" >&2
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
start=$(date +%s)
timeout 60 build/gpu/tests/golden/cuda_golden_test \
  --gtest_filter='*DecodeStepsReplayedAsGraphs*:*CudaGoldenV41*' >"$out/golden.log" 2>&1
status=$?
grep -E "^MEASURED|^\[  (FAILED|SKIPPED) |Failure|Which is|Expected|^\[  PASSED|warn" "$out/golden.log" | head -40
echo "golden: $(( $(date +%s) - start )) s, exit status $status"
timeout 40 build/gpu/tests/ops/ops_cuda_graph_test >"$out/graph.log" 2>&1
status=$?
grep -E "^\[  (FAILED|PASSED) |Failure" "$out/graph.log" | head -20
echo "graph tests: exit status $status"
timeout 120 build/gpu/bench/v4_model_bench --config tests/io/fixtures/v41_flash.release.json "$@" 2>&1 | tee "$out/bench_v41.md"
