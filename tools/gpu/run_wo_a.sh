#!/usr/bin/env bash
# GPU machine, one call: the grouped FP8-block projection on wgmma (V4's wo_a, grouped_fp8_wgmma.cu).
# Builds the parity test, ops_cuda_bench and v4_model_bench; runs the grouped-linear parity tests, then
# ops_cuda_bench --wo-a (bf16 vs FP8 blocks old / wgmma at 1..256 rows), then, if the parity passed and
# time is left, the whole-model A/B of grouped_fp8_weights (run_option_ab.sh). Logs under $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_wo_a.sh [--no-ab]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-/tmp/wo_a}"
logs="$out/wo_a"
mkdir -p "$logs"
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
if ! bash tools/gpu/build.sh ops_cuda_parity_test ops_cuda_bench v4_model_bench >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -30; exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 150 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='CudaParity.Grouped*' >"$logs/parity.log" 2>&1
parity=$?
stamp "parity: exit $parity"
grep -E "^\[       OK|^\[  FAILED|Failure|Expected|Which is|relative error|rows .* row" "$logs/parity.log" | head -40
timeout 120 build/gpu/bench/ops_cuda_bench --wo-a >"$logs/bench.md" 2>&1
stamp "bench: exit $?"
cat "$logs/bench.md"
if [ "$parity" = 0 ] && [ "${1:-}" != "--no-ab" ] && [ $(( $(date +%s) - start )) -lt 100 ]; then
  bash tools/gpu/run_option_ab.sh --batches 1,8,32,128,256 -- "" "grouped_fp8_weights=0"
fi
stamp done
