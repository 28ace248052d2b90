#!/usr/bin/env bash
# One command for the GPU machine: builds the CUDA backend, runs the CUDA-vs-CPU op-parity suite
# and the CUDA op benchmarks, and leaves the logs in $OUT (parity.log, bench.md, build.log,
# sass.txt, gpu.txt). usage (device, repo root, after tools/gpu/collect_deps.sh here and carrying
# .deps): bash tools/gpu/run_parity.sh [--quick] [--no-bench] [--filter GTEST_FILTER]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build/gpu/out}"
mkdir -p "$out"
quick="" bench=1 filter="*"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --no-bench) bench=0 ;;
    --filter) filter="$2"; shift ;;
    *) echo "run_parity.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv >"$out/gpu.txt" 2>&1
start=$(date +%s)
if ! bash tools/gpu/build.sh ops_cuda_parity_test ops_cuda_bench >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "run_parity.sh: build failed" >&2
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
cuobjdump --dump-sass build/gpu/tests/ops/ops_cuda_parity_test 2>/dev/null |
  awk '/Function :/ {f=$3} /HMMA|QGMMA|HGMMA/ {n[f]++} END {for (k in n) print n[k], k}' | sort -rn | head -40 >"$out/sass.txt"
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
start=$(date +%s)
timeout 240 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter="$filter" >"$out/parity.log" 2>&1
status=$?
grep -E "^\[  (FAILED|SKIPPED) |Failure|relative error|Which is|^\[  PASSED" "$out/parity.log" | head -80
tail -2 "$out/parity.log"
echo "parity: $(( $(date +%s) - start )) s, exit status $status"
if [ "$bench" = 1 ]; then
  start=$(date +%s)
  timeout 200 build/gpu/bench/ops_cuda_bench $quick >"$out/bench.md" 2>&1
  cat "$out/bench.md"
  echo "bench: $(( $(date +%s) - start )) s"
fi
