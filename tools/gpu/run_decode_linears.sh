#!/usr/bin/env bash
# GPU machine: the decode linears (1..32 rows) in one call — linear parity (bf16 skinny kernel, grouped
# linear, FP8 decode with the act quant fused, batch invariance), the per-shape decode table of
# ops_cuda_bench --decode (new vs previous paths, weights streamed from HBM), then whole-model decode
# steps of v4_model_bench (4 layers of V4-Flash, dummy weights, graphs) with a CUPTI kernel profile
# at the given batches; optionally cuda_golden_test. Logs in $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_decode_linears.sh [--golden] [--batches "1 32"] [--no-profile]
set -uo pipefail
cd "$(dirname "$0")/../.."
golden=0 profile=1 batches="1 32"
while [ $# -gt 0 ]; do
  case "$1" in
    --golden) golden=1 ;;
    --no-profile) profile=0 ;;
    --batches) batches="$2"; shift ;;
    *) echo "run_decode_linears.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out="${OUT:-/tmp/decode_linears_out}"
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv >"$out/gpu.txt" 2>&1
# The op binaries first (the model targets may be broken by unrelated work in the tree).
if ! bash tools/gpu/build.sh ops_cuda_parity_test ops_cuda_bench >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30; exit 1
fi
stamp "build (ops)"
model_targets="v4_model_bench"
[ "$golden" = 1 ] && model_targets="$model_targets cuda_golden_test"
bash tools/gpu/build.sh $model_targets >>"$out/build.log" 2>&1 &
model_build=$!
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
timeout 150 build/gpu/tests/ops/ops_cuda_parity_test \
  --gtest_filter='*Linear*:*Fp8Decode*:*Bf16*:*BatchInvariant*' >"$out/parity.log" 2>&1
stamp "parity: exit $?, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/parity.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] [A-Za-z]|Failure|relative error|Which is" "$out/parity.log" | head -20
timeout 200 build/gpu/bench/ops_cuda_bench --decode >"$out/decode.md" 2>&1
stamp "ops_cuda_bench --decode: exit $?"
grep -E "^\|" "$out/decode.md" | grep -E "\| (1|8|32) \| (default|previous)" | head -80
if ! wait $model_build; then
  grep -E "error|Error" "$out/build.log" | head -30; stamp "model build failed"; exit 1
fi
stamp "build (model)"
if [ "$golden" = 1 ]; then
  timeout 150 build/gpu/tests/golden/cuda_golden_test >"$out/golden.log" 2>&1
  stamp "cuda_golden_test: exit $?, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/golden.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$out/golden.log" | head -20
fi
bench=build/gpu/bench/v4_model_bench
cfg=tests/io/fixtures/v4_flash.release.json
timeout 120 $bench --config $cfg --num-layers 4 --prefill 16 --batches 1,8,32 --contexts 1024 --steps 6 \
  >"$out/model.md" 2>&1
stamp "v4_model_bench: exit $?"
grep -E "^\||Ceilings" "$out/model.md" | tail -8
if [ "$profile" = 1 ]; then
  prof=/tmp/decode_linears_profile
  rm -rf "$prof"
  OUT="$prof" bash tools/gpu/run_decode_profile.sh --layers 4 --batches "$batches" >"$out/profile.txt" 2>&1
  stamp "profile: exit $?"
  grep -E "busy|gemv|skinny|fp8_decode|mma_gemm|splitk|act_copy|act_quant" "$out/profile.txt" | head -40
  tar -czf "$out/traces.tgz" -C "$prof" . 2>/dev/null
fi
stamp done
