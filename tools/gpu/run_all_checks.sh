#!/usr/bin/env bash
# GPU machine, one call: every GPU test binary (op parity incl. attention/sampling, CUDA graphs, whole
# model vs HF and the CPU incl. graph == eager, the executor, the engine loops on the V4 model) and the
# whole-model bench of the real V4-Flash geometry (dummy weights, N layers; 1K-context grid up to batch
# 256, then 8K contexts at small batches), optionally the engine bench, V4.1's decode grid (--v41), the
# wgmma kernels' tests under compute-sanitizer memcheck (--memcheck) and the CUPTI profiles (--profile:
# decode at batch 1 and 32, one 8K prompt with its GEMMs against the peaks). A summary on stdout; every log in one tarball under $OUT (the device tool brings back
# at most 8 files). The lead's end-of-session check (session 6's final call: --v41 --memcheck --profile,
# ~250 s from a cold machine).
# usage (repo root, .deps carried): bash tools/gpu/run_all_checks.sh [--layers 4] [--no-8k] [--engine] [--v41]
#        [--memcheck] [--profile]
set -uo pipefail
cd "$(dirname "$0")/../.."
layers=4 long=1 engine=0 v41=0 memcheck=0 profile=0
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --no-8k) long=0; shift ;;
    --engine) engine=1; shift ;;
    --v41) v41=1; shift ;;
    --memcheck) memcheck=1; shift ;;
    --profile) profile=1; shift ;;
    *) echo "run_all_checks.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${OUT:-/tmp/all_checks}"
logs="$out/logs"
mkdir -p "$logs"
trap 'tar -czf "$out/all_checks_logs.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
start=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - start ))s] $*"; }
tests="ops_cuda_parity_test ops_cuda_graph_test cuda_golden_test gpu_executor_cuda_test engine_cuda_test"
if ! bash tools/gpu/build.sh $tests v4_model_bench engine_bench >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -30; exit 1
fi
stamp build
export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fail=0
for t in $tests; do
  bin=$(find build/gpu/tests -name "$t" -type f -perm -u+x | head -1)
  timeout 240 "$bin" >"$logs/$t.log" 2>&1
  status=$?
  [ $status = 0 ] || fail=1
  stamp "$t: exit $status, $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$logs/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$logs/$t.log" | head -20
done
bench=build/gpu/bench/v4_model_bench
cfg=tests/io/fixtures/v4_flash.release.json
timeout 200 $bench --config $cfg --num-layers "$layers" --prefill 1024,8192 --batches 1,8,32,128,256 --contexts 1024 \
  --steps 4 >"$logs/bench_1k.md" 2>&1
stamp "bench 1K contexts: exit $?"
grep -E "^\||Ceilings|loaded" "$logs/bench_1k.md"
if [ "$engine" = 1 ]; then
  OUT="$logs/engine" MODEL_BENCH=0 timeout 200 bash tools/gpu/run_engine_bench.sh >"$logs/engine_bench.txt" 2>&1
  stamp "engine bench: exit $?"
  grep -vE "^== " "$logs/engine_bench.txt" | head -60
fi
if [ "$long" = 1 ]; then
  timeout 150 $bench --config $cfg --num-layers "$layers" --prefill 16 --batches 1,32 --contexts 8192 --steps 4 \
    >"$logs/bench_8k.md" 2>&1
  stamp "bench 8K contexts: exit $?"
  grep -E "^\| *[0-9]+ *\| *8192" "$logs/bench_8k.md"
fi
if [ "$v41" = 1 ]; then
  timeout 150 $bench --config tests/io/fixtures/v41_flash.release.json --num-layers "$layers" --prefill 1024 \
    --batches 1,8,32 --contexts 1024 --steps 4 >"$logs/bench_v41.md" 2>&1
  stamp "V4.1 bench: exit $?"
  grep -E "^\| *[0-9]+ *\|" "$logs/bench_v41.md"
fi
if [ "$memcheck" = 1 ]; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  parity=$(find build/gpu/tests -name ops_cuda_parity_test -type f -perm -u+x | head -1)
  timeout 200 "$sanitizer" --tool memcheck "$parity" \
    --gtest_filter='CudaParity.MoeFp4Wgmma*:CudaParity.MoePrefillFp8*:CudaParity.Grouped*:CudaParity.MoeDecode*:CudaParity.Fp8WgmmaDecodeFused*-CudaParity.MoeFp4WgmmaExpertShapes*' \
    >"$logs/memcheck.log" 2>&1
  stamp "wgmma tests under memcheck: exit $?, $(grep -E 'ERROR SUMMARY|^\[  PASSED' "$logs/memcheck.log" | tr '\n' ' ')"
fi
if [ "$profile" = 1 ]; then
  OUT="$logs/profile" timeout 200 bash tools/gpu/run_decode_profile.sh --layers "$layers" --batches "1 32" \
    >"$logs/profile.txt" 2>&1
  stamp "decode profile: exit $?"
  grep -E "^## |median step|^ +[0-9]+ +[0-9.]+ " "$logs/profile.txt" | cut -c1-140 | head -40
  # One 8K prompt under the tracer: its top kernels and its GEMMs against the tensor-core peaks.
  OUT="$logs/prefill_profile" timeout 200 bash tools/gpu/run_prefill_profile.sh --layers "$layers" --tokens 8192 \
    --runs "32:fp8" --no-build >"$logs/prefill_profile.txt" 2>&1
  stamp "prefill profile: exit $?"
  grep -E "^\| |forward " "$logs/prefill_profile.txt" | head -20
fi
stamp "done, tests $([ $fail = 0 ] && echo passed || echo FAILED)"
