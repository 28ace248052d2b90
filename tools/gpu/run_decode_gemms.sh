#!/usr/bin/env bash
# GPU machine, one call: the decode GEMMs (dense FP8 linears and routed fp4 experts) — their parity
# tests, ops_cuda_bench --decode / --moe (default paths vs the mma.sync kernels), whole decode steps
# with the defaults and with both wgmma kernels off, the CUPTI decode profile at batch 1 and 32, and
# (--ncu) Nsight Compute's sections for a few launches of the experts' wgmma kernel.
# Logs in one tarball $OUT/decode_gemms.tgz; a summary on stdout.
# usage (repo root, .deps carried): bash tools/gpu/run_decode_gemms.sh [--ncu] [--no-bench] [--no-profile]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ncu_run=0 bench=1 profile=1
for arg in "$@"; do
  case "$arg" in
    --ncu) ncu_run=1 ;;
    --no-bench) bench=0 ;;
    --no-profile) profile=0 ;;
    *) echo "run_decode_gemms.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/decode_gemms}"
logs="$out/decode_gemms"
mkdir -p "$logs"
trap 'tar -czf "$out/decode_gemms.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
# shellcheck source=tools/gpu/wgmma_run_lib.sh
source tools/gpu/wgmma_run_lib.sh
wg_build "$logs/build.log" ops_cuda_parity_test ops_cuda_bench v4_model_bench || exit 1
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
parity=build/gpu/tests/ops/ops_cuda_parity_test
wg_gtest "$parity" '*Linear*:*Fp8*:*Moe*:*BatchInvariant*' "$logs/parity.log" 240
if [ "$bench" = 1 ]; then
  timeout 120 build/gpu/bench/ops_cuda_bench --decode >"$logs/decode.md" 2>&1
  wg_stamp "ops_cuda_bench --decode: exit $?"
  grep -E "^\| .*fp8/128 \| (1|8|16|32|64) \| (default|fp8 mma.sync) " "$logs/decode.md"
  timeout 150 build/gpu/bench/ops_cuda_bench --moe >"$logs/moe.md" 2>&1
  wg_stamp "ops_cuda_bench --moe: exit $?"
  grep -E "^\| [0-9]+ \| [0-9]+ \| (default|mma.sync) " "$logs/moe.md"
fi
cfg=tests/io/fixtures/v4_flash.release.json
for off in 0 1; do
  if [ "$off" = 1 ]; then set -- env DEEPINFER_FP8_WGMMA=0 DEEPINFER_MOE_FP4_WGMMA=0; else set -- env; fi
  echo "## wgmma kernels $([ "$off" = 1 ] && echo off || echo on '(defaults)')" >>"$logs/model.md"
  timeout 120 "$@" build/gpu/bench/v4_model_bench --config $cfg --num-layers 4 --prefill 16 --batches 1,8,32,128 \
    --contexts 1024 --steps 6 >>"$logs/model.md" 2>&1
  wg_stamp "v4_model_bench (wgmma $([ "$off" = 1 ] && echo off || echo on)): exit $?"
done
grep -E "^## |^\| *[0-9]+ *\| *1024" "$logs/model.md"
if [ "$profile" = 1 ]; then
  OUT="$logs/profile" timeout 200 bash tools/gpu/run_decode_profile.sh --batches "1 32" >"$logs/profile.txt" 2>&1
  wg_stamp "decode profile: exit $?"
  cat "$logs/profile.txt"
fi
if [ "$ncu_run" = 1 ]; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  # Experts at decode: the wgmma kernel's first launches (T = 1: items of 8 rows), every section.
  timeout 150 "$ncu" --clock-control none --set full -k regex:moe_fp4_wgmma --launch-skip 2 --launch-count 2 \
    build/gpu/bench/ops_cuda_bench --moe >"$logs/ncu_moe.txt" 2>&1
  wg_stamp "ncu moe_fp4_wgmma: exit $?"
  timeout 100 "$ncu" --clock-control none --set full -k regex:fp8_wgmma_decode --launch-skip 4 --launch-count 2 \
    build/gpu/bench/ops_cuda_bench --decode >"$logs/ncu_dense.txt" 2>&1
  wg_stamp "ncu fp8_wgmma_decode: exit $?"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issue Slots Busy|Theoretical Occupancy|Block Limit" \
    "$logs/ncu_moe.txt" | head -40
fi
wg_stamp done
