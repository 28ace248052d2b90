#!/usr/bin/env bash
# Regenerates the HF-transformers golden fixtures on the GPU machine (torch 2.11 + transformers 5.17 preinstalled,
# no network) and packs them into $OUT/golden_v4.tar.gz, since the device returns only a few files from $OUT.
# Usage there:  bash tools/gpu/run_golden.sh   (then unpack into tests/golden/ here; see tests/golden/README.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:?run_golden: OUT must name the folder whose files come back}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__,
"cuda", torch.cuda.is_available())'
mkdir -p "$out/golden"
python3 tools/make_golden.py --device cuda --out "$out/golden/v4" "$@" 2>&1 | grep -v '^Loading weights\|^Writing model' \
  | tee "$out/make_golden.log"
tar -C "$out/golden" -czf "$out/golden_v4.tar.gz" v4
rm -rf "$out/golden"
ls -la "$out"
