#!/usr/bin/env bash
# GPU machine, one call: the grouped FP8-block projection on wgmma (V4's wo_a, grouped_fp8_wgmma.cu).
# Builds the parity test and ops_cuda_bench; runs the grouped-linear parity tests, then ops_cuda_bench
# --wo-a (bf16 vs FP8 blocks old / the wgmma kernel's forms at 1..256 rows), then, if the parity passed
# and fewer than BUDGET_AB seconds (default 60) have gone, builds v4_model_bench and A/Bs the whole model:
# defaults vs 64-token tiles only (grouped_fp8_wgmma_wide=0). Logs under
# $OUT/wo_a (decode rows printed as they come, so a call cut by its time limit still reports them).
# usage (repo root, .deps carried): bash tools/gpu/run_wo_a.sh [--no-ab] [--batches 1,8,32,128,256]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ab=1 batches="1,8,32,128,256"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-ab) ab=0; shift ;;
    --batches) batches="$2"; shift 2 ;;
    *) echo "run_wo_a.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/wo_a}"
logs="$out/wo_a"
mkdir -p "$logs"
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
if ! bash tools/gpu/build.sh ops_cuda_parity_test ops_cuda_bench >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -30; exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 150 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='CudaParity.Grouped*' >"$logs/parity.log" 2>&1
parity=$?
stamp "parity: exit $parity"
grep -E "^\[       OK|^\[  FAILED|Failure|Expected|Which is|relative error|rows .* row|M=" "$logs/parity.log" | head -40
timeout 120 build/gpu/bench/ops_cuda_bench --wo-a >"$logs/bench.md" 2>&1
stamp "bench: exit $?"
grep -E "^\| [0-9]" "$logs/bench.md"
if [ "$parity" = 0 ] && [ "$ab" = 1 ] && [ $(( $(date +%s) - start )) -lt "${BUDGET_AB:-60}" ]; then
  bash tools/gpu/build.sh v4_model_bench >>"$logs/build.log" 2>&1 || exit 1
  stamp "build v4_model_bench"
  i=0
  for set in "" "grouped_fp8_wgmma_wide=0"; do
    i=$((i + 1))
    opt=()
    [ -n "$set" ] && opt=(--cuda-option "$set")
    timeout 100 build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers 4 \
      --prefill 16 --batches "$batches" --contexts 1024 --steps 4 "${opt[@]}" >"$logs/model$i.md" 2>&1
    stamp "model $i [${set:-defaults}]: exit $?"
    grep -E "^\| *[0-9]+ *\| *1024 *\|" "$logs/model$i.md"
  done
fi
stamp done
