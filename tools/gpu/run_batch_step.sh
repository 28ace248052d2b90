#!/usr/bin/env bash
# One command for the GPU machine checking the batched, graph-ready forward step: builds once, then
# (1) op parity of the batched ops (indexer scores, top-k, compressor, candidate mask, row scatters), (2) the whole
# model against HF and the CPU (cuda_golden_test, incl. graph replay == eager launches), (3) the V4
# model bench (eager and graph-replayed decode steps). Logs in $OUT (build.log, parity.log,
# golden.log, bench.md). usage (device, repo root, .deps carried):
#   bash tools/gpu/run_batch_step.sh [v4_model_bench flags...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv >"$out/gpu.txt" 2>&1
start=$(date +%s)
if ! bash tools/gpu/build.sh cuda_golden_test ops_cuda_parity_test v4_model_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "run_batch_step.sh: build failed" >&2
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 60 build/gpu/tests/ops/ops_cuda_parity_test \
  --gtest_filter='*Indexer*:*Topk*:*Compressor*:*Candidate*:*Rows*:*Scatter*' >"$out/parity.log" 2>&1
echo "parity: exit status $?"
grep -E "^\[  (FAILED|PASSED) |Failure" "$out/parity.log" | head -20
start=$(date +%s)
timeout 150 build/gpu/tests/golden/cuda_golden_test >"$out/golden.log" 2>&1
status=$?
grep -E "^MEASURED|^\[  (FAILED|SKIPPED) |Failure|Which is|Expected|^\[  PASSED" "$out/golden.log" | head -60
echo "golden: $(( $(date +%s) - start )) s, exit status $status"
timeout 140 build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json "$@" 2>&1 | tee "$out/bench.md"
