#!/usr/bin/env bash
# GPU machine, one call: the routed experts' fp8 prefill GEMM (moe_prefill_fp8_wgmma.cu). Builds
# ops_cuda_parity_test and v4_model_bench, runs the MoE parity tests (the fp8 and bf16 prefill GEMMs, the
# skinny decode paths it shares the pipeline with), the 4-layer V4-Flash prefill bench with the fp8 GEMM
# off and on (and with each --ab option set), a CUPTI trace of each 8K prompt (the GEMM's own time:
# tools/gpu/prefill_trace_report.py; the GEMM families against the peaks: prefill_gemm_report.py), Nsight
# Compute's sections for the GEMM's two launches of one 8K layer (--ncu: application replay, stall
# reasons per SASS line in ncu_source_*.csv.gz) and
# compute-sanitizer memcheck over the fp8 parity tests (every scale form, both token halves). Logs in $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_prefill_fp8.sh [--no-trace] [--no-memcheck]
#   [--no-parity] [--no-bf16] [--ncu COLUMN] [--ab NAME=VALUE[,NAME=VALUE]]...  (each --ab: another column, its
#   options as v4_model_bench --cuda-option pairs; --ncu profiles one column: fp8 (the defaults), ab0, ab1 ...)
set -uo pipefail
cd "$(dirname "$0")/../.."
trace=1 memcheck=1 parity=1 bf16=1 ncu_label=""
abs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-trace) trace=0 ;;
    --no-memcheck) memcheck=0 ;;
    --no-parity) parity=0 ;;
    --no-bf16) bf16=0 ;;
    --ncu) ncu_label="$2"; shift ;;
    --ab) abs+=("$2"); shift ;;
    *) echo "run_prefill_fp8.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
out="${OUT:-/tmp/prefill_fp8_out}"
mkdir -p "$out"
start=$(date +%s)
targets=(v4_model_bench)
[ "$parity" = 1 ] || [ "$memcheck" = 1 ] && targets+=(ops_cuda_parity_test)
if ! bash tools/gpu/build.sh "${targets[@]}" >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
if [ "$parity" = 1 ]; then
  timeout 240 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter='CudaParity.Moe*' >"$out/parity.log" 2>&1
  echo "parity rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/parity.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure|error' "$out/parity.log" | head -20
  echo "parity: $(( $(date +%s) - start )) s"
fi
bench=(build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers 4)
# Columns: label and extra bench flags ("bf16" = the fp8 GEMM off; "fp8" = defaults; then each --ab).
labels=() flags=()
[ "$bf16" = 1 ] && { labels+=(bf16); flags+=("--moe-prefill-fp8 0"); }
labels+=(fp8); flags+=("--moe-prefill-fp8 1")
for i in "${!abs[@]}"; do
  f="--moe-prefill-fp8 1"
  IFS=, read -ra kv <<<"${abs[$i]}"
  for p in "${kv[@]}"; do f+=" --cuda-option $p"; done
  labels+=("ab$i"); flags+=("$f")
  echo "ab$i = ${abs[$i]}"
done
for i in "${!labels[@]}"; do
  echo "## ${labels[$i]}: ${flags[$i]}"
  # shellcheck disable=SC2086
  timeout 150 "${bench[@]}" --prefill 1024,8192 --batches 1 --contexts 1024 --steps 2 ${flags[$i]} \
    >"$out/bench_${labels[$i]}.md" 2>&1
  grep -E '^\| *(1024|8192) *\|' "$out/bench_${labels[$i]}.md"
done
echo "bench: $(( $(date +%s) - start )) s"
if [ "$trace" = 1 ] && bash tools/gpu/build_kernel_trace.sh "$out/trace_build.log"; then
  for i in "${!labels[@]}"; do
    echo "## trace, 8K prompt, ${labels[$i]}"
    # shellcheck disable=SC2086
    timeout 120 env KERNEL_TRACE_OUT="/tmp/trace_${labels[$i]}.csv" LD_PRELOAD=/tmp/kernel_trace.so \
      "${bench[@]}" --prefill 8192 --batches 1 --contexts 16 --steps 1 ${flags[$i]} >/dev/null 2>&1
    python3 tools/gpu/prefill_trace_report.py "/tmp/trace_${labels[$i]}.csv" --top 8 2>&1
    python3 tools/gpu/prefill_gemm_report.py "/tmp/trace_${labels[$i]}.csv" \
      --config tests/io/fixtures/v4_flash.release.json --layers 4 --tokens 8192 2>&1
    gzip -f "/tmp/trace_${labels[$i]}.csv"
  done
  tar -C /tmp -cf "$out/traces.tar" $(cd /tmp && ls trace_*.csv.gz)
  echo "trace: $(( $(date +%s) - start )) s"
fi
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [ "$memcheck" = 1 ] && [ -x "$sanitizer" ]; then
  timeout 120 "$sanitizer" --tool memcheck build/gpu/tests/ops/ops_cuda_parity_test \
    --gtest_filter='CudaParity.MoePrefillFp8*' >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
  echo "memcheck: $(( $(date +%s) - start )) s"
fi
if [ -n "$ncu_label" ]; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  one=(build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers 1
       --prefill 8192 --batches 1 --contexts 16 --steps 1)
  for i in "${!labels[@]}"; do
    [ "${labels[$i]}" = "$ncu_label" ] || continue
    # The first launch: layer 0's w1/w3 GEMM of the warm-up 8K prompt.
    # shellcheck disable=SC2086
    timeout 75 "$ncu" --clock-control none --replay-mode application -k regex:moe_prefill_fp8 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
      --section InstructionStats --section SourceCounters -f -o "/tmp/ncu_${labels[$i]}" \
      "${one[@]}" ${flags[$i]} >"$out/ncu_run_${labels[$i]}.log" 2>&1
    echo "ncu ${labels[$i]}: exit $? ($(( $(date +%s) - start )) s)"
    "$ncu" -i "/tmp/ncu_${labels[$i]}.ncu-rep" --page details >"$out/ncu_${labels[$i]}.txt" 2>&1
    "$ncu" -i "/tmp/ncu_${labels[$i]}.ncu-rep" --page source --csv --print-source sass 2>&1 |
      gzip >"/tmp/ncu_source_${labels[$i]}.csv.gz"
    grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Executed Ipc A" \
      "$out/ncu_${labels[$i]}.txt" | head -30
  done
  tar -C /tmp -cf "$out/ncu.tar" $(cd /tmp && ls ncu_source_*.csv.gz 2>/dev/null)
fi
# At most 8 files come back from a device call: the logs in one tar.
(cd "$out" && tar -cf logs.tar ./*.log ./*.md ./*.txt 2>/dev/null && rm -f ./*.log ./*.md ./*.txt)
