#!/usr/bin/env bash
# GPU machine, one call: the device sampler's parity with the CPU op (every sampling test of
# ops_cuda_parity_test, the top-p cut and top-k gathered paths included) and its per-call times at
# the DeepSeek vocabulary. A summary and the timing lines on stdout; logs in $OUT. Exit non-zero on a
# build or test failure.
# usage (repo root, .deps carried): bash tools/gpu/run_sampling.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/sampling_run}"
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
if ! bash tools/gpu/build.sh ops_cuda_parity_test >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
bin=$(find build/gpu/tests -name ops_cuda_parity_test -type f -perm -u+x | head -1)
timeout 90 "$bin" --gtest_filter='*Sampl*' >"$out/sampling_parity.log" 2>&1
status=$?
stamp "ops_cuda_parity_test *Sampl*: exit $status, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/sampling_parity.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] [A-Za-z]" "$out/sampling_parity.log" | head -20
grep -E -A12 "Failure" "$out/sampling_parity.log" | head -40
grep -E "^device sampling" "$out/sampling_parity.log"
exit $status
