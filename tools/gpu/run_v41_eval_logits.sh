#!/usr/bin/env bash
# GPU machine: builds the CLI and runs `deepinfer eval-logits --mode exact` on the V4.1 golden fixtures
# (roles_plain, no_engram_nocand: plain numerics) on the CUDA and the CPU backend, each compared with HF's
# logits_full.npy (max|d|/max|ref|). Logs in $OUT. usage (device tool, carry [".deps"]):
#   bash tools/gpu/run_v41_eval_logits.sh
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/gpu/out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
bash tools/gpu/build.sh deepinfer > $OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head -20; exit 1; }
for c in roles_plain no_engram_nocand; do
  d=tests/golden/v41/$c
  ids=$(python3 -c "import json;m=json.load(open('$d/meta.json'));print(','.join(map(str,m['prompt_ids']+m['greedy_ids'])))")
  for dev in cuda cpu; do
    timeout 60 build/gpu/src/cli/deepinfer eval-logits --model $d/model --mode exact --ids $ids --device $dev --output $OUT/${c}_$dev.npy > $OUT/${c}_$dev.log 2>&1 || { echo "$c $dev failed:"; tail -3 $OUT/${c}_$dev.log; }
  done
  python3 - $d $OUT $c <<'PY'
import sys, numpy as np
d, out, c = sys.argv[1:]
ref = np.load(f"{d}/logits_full.npy")
for dev in ("cuda", "cpu"):
    try:
        got = np.load(f"{out}/{c}_{dev}.npy")
        print(c, dev, "max|d|/max|ref| vs HF =", f"{np.abs(got - ref).max() / np.abs(ref).max():.3g}")
    except Exception as e:
        print(c, dev, "no result:", e)
PY
done
rm -f $OUT/*.npy
