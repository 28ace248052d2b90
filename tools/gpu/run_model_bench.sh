#!/usr/bin/env bash
# One command for the GPU machine (issue 6 item 5): builds bench/v4_model_bench and times the V4 model
# on dummy weights of the real V4-Flash geometry cut to N layers (prefill 1K/8K; decode at batch
# 1/8/32/128/256 with 1K and 8K contexts; ceilings measured in the same run), then HF transformers'
# DeepseekV4ForCausalLM with the same geometry and layer count in bf16 (tools/gpu/bench_hf_v4.py).
# Logs in $OUT (build.log, deepinfer.md, hf.md). usage (device, repo root, .deps carried):
#   bash tools/gpu/run_model_bench.sh [--num-layers 8] [--no-hf] [--hf-args "--batches 1,8,32 ..."]
#        [extra v4_model_bench flags...]
# --hf-args: bench_hf_v4.py's own grid flags (HF's bf16 eager model is slow: its full grid takes many minutes).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out"
layers=8 hf=1 hf_args="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --num-layers) layers="$2"; shift ;;
    --no-hf) hf=0 ;;
    --hf-args) hf_args="$2"; shift ;;
    *) extra+=("$1") ;;
  esac
  shift
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv >"$out/gpu.txt" 2>&1
if ! bash tools/gpu/build.sh v4_model_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 420 build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers "$layers" \
  "${extra[@]}" 2>&1 | tee "$out/deepinfer.md"
if [ "$hf" = 1 ]; then
  PYTHONUNBUFFERED=1 timeout 420 python3 tools/gpu/bench_hf_v4.py --config tests/io/fixtures/v4_flash.hf.json \
    --num-layers "$layers" $hf_args 2>&1 | grep -v -i warn | tee "$out/hf.md"
fi
