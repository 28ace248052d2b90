#!/usr/bin/env bash
# GPU machine, one call: an A/B of backend choices on one build. Builds v4_model_bench (and, with
# --parity FILTER, ops_cuda_parity_test and runs that gtest filter first), then runs the whole-model
# decode bench once per option set: "" = the build's defaults, else comma-separated NAME=VALUE
# CudaBackendOptions assignments (v4_model_bench --cuda-option). Prints each run's decode rows; logs in
# one tarball under $OUT.
# usage (repo root, .deps carried): bash tools/gpu/run_option_ab.sh [--parity FILTER] [--batches 1,8,32,128]
#        [--layers 4] [--prefill 16] -- "" "cublas_large_min_rows=8" "bf16_skinny_linear=1,bf16_skinny_unroll=2"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
parity="" batches="1,8,32,128" layers=4 prefill=16
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --parity) parity="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --prefill) prefill="$2"; shift 2 ;;
    *) echo "run_option_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || set -- ""
out="${OUT:-/tmp/option_ab}"
logs="$out/option_ab"
mkdir -p "$logs"
trap 'tar -czf "$out/option_ab.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
targets="v4_model_bench"
[ -n "$parity" ] && targets="$targets ops_cuda_parity_test"
if ! bash tools/gpu/build.sh $targets >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -30; exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
if [ -n "$parity" ]; then
  timeout 240 build/gpu/tests/ops/ops_cuda_parity_test --gtest_filter="$parity" >"$logs/parity.log" 2>&1
  stamp "parity $parity: exit $?, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$logs/parity.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$logs/parity.log" | head -20
fi
i=0
for set in "$@"; do
  i=$((i + 1))
  opt=()
  [ -n "$set" ] && opt=(--cuda-option "$set")
  timeout 150 build/gpu/bench/v4_model_bench --config tests/io/fixtures/v4_flash.release.json --num-layers "$layers" \
    --prefill "$prefill" --batches "$batches" --contexts 1024 --steps 4 "${opt[@]}" >"$logs/run$i.md" 2>&1
  stamp "run $i [${set:-defaults}]: exit $?"
  grep -E "^\| *[0-9]+ *\| *1024 *\||^\| *[0-9]+ \| [0-9]+\.[0-9]{3} \|" "$logs/run$i.md"  # decode rows, prefill rows
done
stamp done
