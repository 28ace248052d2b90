#!/usr/bin/env bash
# One command for the GPU machine: builds the CUDA golden test and the CLI, runs the whole V4 model on
# the CUDA backend against the HF golden fixtures and the CPU backend (cuda_golden_test), then
# `deepinfer eval-logits --device cuda` on one fixture compared with HF's logits_full.npy (skipped if
# the CLI does not build); --parity also builds and runs the op-parity suite.
# Logs in $OUT (build.log, golden.log, parity.log, eval_logits.log, gpu.txt). usage (device, repo root,
# after tools/gpu/collect_deps.sh here and carrying .deps):
#   bash tools/gpu/run_model_golden.sh [--filter GTEST_FILTER] [--parity] [--no-cli]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out"
filter="*" parity=0 cli=1
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) filter="$2"; shift ;;
    --parity) parity=1 ;;
    --no-cli) cli=0 ;;
    *) echo "run_model_golden.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv >"$out/gpu.txt" 2>&1
start=$(date +%s)
targets="cuda_golden_test"
[ "$parity" = 1 ] && targets="$targets ops_cuda_parity_test"
# shellcheck disable=SC2086
if ! bash tools/gpu/build.sh $targets >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "run_model_golden.sh: build failed" >&2
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
start=$(date +%s)
timeout 300 build/gpu/tests/golden/cuda_golden_test --gtest_filter="$filter" >"$out/golden.log" 2>&1
status=$?
grep -E "^MEASURED|^OPCHECK|^OPWORST|^\[  (FAILED|SKIPPED) |Failure|Which is|Expected|^\[  PASSED" "$out/golden.log" | head -200
tail -2 "$out/golden.log"
echo "golden: $(( $(date +%s) - start )) s, exit status $status"
if [ "$parity" = 1 ]; then
  start=$(date +%s)
  timeout 240 build/gpu/tests/ops/ops_cuda_parity_test >"$out/parity.log" 2>&1 || status=1
  grep -E "^\[  (FAILED|SKIPPED) |Failure|relative error|Which is|^\[  PASSED" "$out/parity.log" | head -60
  echo "parity: $(( $(date +%s) - start )) s"
fi
if [ "$cli" = 0 ] || ! bash tools/gpu/build.sh deepinfer >>"$out/build.log" 2>&1; then
  echo "eval-logits skipped (--no-cli, or the CLI did not build: see build.log)"
  exit $status
fi
# eval-logits on one fixture, both devices, against HF.
case_dir=tests/golden/v4/csa_hca_mix
ids=$(python3 -c "import json; m=json.load(open('$case_dir/meta.json')); print(','.join(map(str, m['prompt_ids'] + m['greedy_ids'])))")
cli=$(find build/gpu -name deepinfer -type f -perm -u+x | head -1)
for dev in cuda cpu; do
  /usr/bin/time -f "eval-logits --device $dev: %e s" "$cli" eval-logits --model "$case_dir/model" --mode exact \
    --ids "$ids" --device "$dev" --output "$out/eval_$dev.npy" >>"$out/eval_logits.log" 2>&1
done
python3 - "$case_dir" "$out" <<'PY' | tee -a "$out/eval_logits.log"
import sys, numpy as np
ref = np.load(sys.argv[1] + "/logits_full.npy")
for dev in ("cuda", "cpu"):
    got = np.load(f"{sys.argv[2]}/eval_{dev}.npy")
    print(f"eval-logits --device {dev}: max|d|/max|ref| vs HF = {np.abs(got - ref).max() / np.abs(ref).max():.3g}")
PY
grep "eval-logits --device" "$out/eval_logits.log"
rm -f "$out"/eval_*.npy
exit $status
