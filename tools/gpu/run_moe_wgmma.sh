#!/usr/bin/env bash
# GPU machine, one call: the routed experts' decode wgmma kernel (moe_fp4_wgmma.cu): the MoE parity
# tests, ops_cuda_bench --moe-wgmma (vs the mma.sync kernel at 1..512 tokens), then the wgmma tests
# under compute-sanitizer memcheck (a full-size V4-Flash expert case included: act block 32's) — last, so a slow sanitizer cannot cost the timings.
# Logs in one tarball $OUT/moe_wgmma.tgz; a summary on stdout.
# --act32: the bench times V4.1's act block 32 instead (skinny vs CudaBackendOptions::moe_fp4_wgmma_act32).
# --ncu: Nsight Compute (application replay) on the register-A kernel's first decode w1/w3 launch of a
#   1-layer V4-Flash model at batch 1 (its default ring depth and 5 stages) and 32, before the bench.
# --model "OPTS": the 4-layer decode step (v4_model_bench, batches 1 / 8 / 32 / 128) with the defaults
#   and with --cuda-option OPTS (e.g. moe_fp4_wgmma_stages=5), after the bench.
# usage (repo root, .deps carried): bash tools/gpu/run_moe_wgmma.sh [--no-memcheck] [--act32] [--ncu] [--model OPTS]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
memcheck=1 bench_arg="" ncu_run=0 model_opts=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-memcheck) memcheck=0 ;;
    --act32) bench_arg=--act32 ;;
    --ncu) ncu_run=1 ;;
    --model) model_opts=$2; shift ;;
    *) echo "run_moe_wgmma.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out="${OUT:-/tmp/moe_wgmma}"
logs="$out/moe_wgmma"
mkdir -p "$logs"
trap 'tar -czf "$out/moe_wgmma.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
# shellcheck source=tools/gpu/wgmma_run_lib.sh
source tools/gpu/wgmma_run_lib.sh
wg_build "$logs/build.log" ops_cuda_parity_test ops_cuda_bench v4_model_bench || exit 1
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cfg=tests/io/fixtures/v4_flash.release.json
if [ "$ncu_run" = 1 ]; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  # Launches of the kernel: 2 per forward (w1/w3, w2); the prefill warm-up and timed prompt (16 tokens:
  # items of 8) come first, the 1024-token contexts take the shared-memory form: skip 4 = the first decode w1/w3.
  for run in "1 0" "1 5" "32 0"; do
    set -- $run
    timeout 120 "$ncu" --clock-control none --replay-mode application -k regex:moe_fp4_wgmma_rega --launch-skip 4 \
      --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
      --section LaunchStats --metrics dram__bytes_read.sum,smsp__inst_executed.sum \
      build/gpu/bench/v4_model_bench --config $cfg --num-layers 1 --prefill 16 --batches "$1" --contexts 1024 --steps 1 \
      --cuda-option "moe_fp4_wgmma_stages=$2" >"$logs/ncu_b$1_s$2.txt" 2>&1
    wg_stamp "ncu batch $1 stages $2: exit $?"
    grep -E "Grid Size|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Dynamic Shared|Issued Warp Per|No Eligible|Warp Cycles Per Issued|Stall|dram__bytes|inst_executed" \
      "$logs/ncu_b$1_s$2.txt" | head -24
  done
fi
parity=build/gpu/tests/ops/ops_cuda_parity_test
wg_gtest "$parity" '*Moe*' "$logs/parity.log" 150
grep -E "^moe_fp4_wgmma" "$logs/parity.log" | head -24
timeout 150 build/gpu/bench/ops_cuda_bench --moe-wgmma $bench_arg >"$logs/moe_wgmma.md" 2>&1
wg_stamp "ops_cuda_bench --moe-wgmma: exit $?"
grep -E "^\| [0-9]+ \| [0-9]+ \| " "$logs/moe_wgmma.md"
if [ -n "$model_opts" ]; then
  for opts in "" "$model_opts"; do
    echo "## options: ${opts:-defaults}" >>"$logs/model.md"
    timeout 120 build/gpu/bench/v4_model_bench --config $cfg --num-layers 4 --prefill 16 --batches 1,8,32,128 \
      --contexts 1024 --steps 4 ${opts:+--cuda-option "$opts"} >>"$logs/model.md" 2>&1
    wg_stamp "v4_model_bench ${opts:-defaults}: exit $?"
  done
  grep -E "^## |^\| *[0-9]+ *\| *1024" "$logs/model.md"
fi
if [ "$memcheck" = 1 ]; then
  wg_gtest "$parity" 'CudaParity.MoeFp4WgmmaOddKStage*:CudaParity.MoeFp4WgmmaProbe*:CudaParity.MoeFp4WgmmaOneExpert*:CudaParity.MoeFp4WgmmaActBlock32*:CudaParity.MoeFp4WgmmaPermuted*:CudaParity.MoeFp4WgmmaScaleCodes*' \
    "$logs/memcheck.log" 120 memcheck
fi
wg_stamp done
