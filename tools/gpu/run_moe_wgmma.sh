#!/usr/bin/env bash
# GPU machine, one call: the routed experts' decode wgmma kernel (moe_fp4_wgmma.cu): the MoE parity
# tests, ops_cuda_bench --moe-wgmma (vs the mma.sync kernel at 1..512 tokens), then the wgmma tests
# under compute-sanitizer memcheck (a full-size V4-Flash expert case included: act block 32's) — last, so a slow sanitizer cannot cost the timings.
# Logs in one tarball $OUT/moe_wgmma.tgz; a summary on stdout.
# --act32: the bench times V4.1's act block 32 instead (skinny vs CudaBackendOptions::moe_fp4_wgmma_act32).
# usage (repo root, .deps carried): bash tools/gpu/run_moe_wgmma.sh [--no-memcheck] [--act32]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
memcheck=1 bench_arg=""
for arg in "$@"; do
  case "$arg" in
    --no-memcheck) memcheck=0 ;;
    --act32) bench_arg=--act32 ;;
    *) echo "run_moe_wgmma.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/moe_wgmma}"
logs="$out/moe_wgmma"
mkdir -p "$logs"
trap 'tar -czf "$out/moe_wgmma.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
# shellcheck source=tools/gpu/wgmma_run_lib.sh
source tools/gpu/wgmma_run_lib.sh
wg_build "$logs/build.log" ops_cuda_parity_test ops_cuda_bench || exit 1
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
parity=build/gpu/tests/ops/ops_cuda_parity_test
wg_gtest "$parity" '*Moe*' "$logs/parity.log" 150
grep -E "^moe_fp4_wgmma" "$logs/parity.log" | head -24
timeout 150 build/gpu/bench/ops_cuda_bench --moe-wgmma $bench_arg >"$logs/moe_wgmma.md" 2>&1
wg_stamp "ops_cuda_bench --moe-wgmma: exit $?"
grep -E "^\| [0-9]+ \| [0-9]+ \| " "$logs/moe_wgmma.md"
if [ "$memcheck" = 1 ]; then
  wg_gtest "$parity" 'CudaParity.MoeFp4WgmmaOddKStage*:CudaParity.MoeFp4WgmmaProbe*:CudaParity.MoeFp4WgmmaOneExpert*:CudaParity.MoeFp4WgmmaActBlock32*' \
    "$logs/memcheck.log" 120 memcheck
fi
wg_stamp done
