#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, builds the sanitizer flavour
# (clang ASan+UBSan with the libFuzzer targets) and runs its unit tests and each fuzzer briefly,
# then builds the release flavour and runs the full suite (unit, golden, e2e) last, so ctest's
# summary is the final line.
set -euo pipefail
cd "$(dirname "$0")/.."
# Seconds per phase, printed before the last ctest run (docs/CI.md tracks them).
phases=""; phase_start=$SECONDS
phase_done() { phases+="$1 $((SECONDS - phase_start)) s, "; phase_start=$SECONDS; }
bash tools/install_deps.sh
jobs="${DEEPINFER_BUILD_JOBS:-$(nproc)}"
phase_done install

# Only what `ctest -L 'unit|fuzz'` runs is built here (golden/e2e run in the release flavour), and
# each fuzzer gets 10 s past its seeds: 12+ fuzzers on 2 cores were CI's biggest test item.
DEEPINFER_TEST_LABELS="unit;fuzz" DEEPINFER_FUZZ_SECONDS=10 bash tools/build.sh asan
phase_done "asan build"
(cd build/asan && ctest -L 'unit|fuzz' -j "$jobs" --output-on-failure --timeout 600) >build/asan-ctest.log 2>&1 \
  || { cat build/asan-ctest.log; echo "test_all: sanitizer unit tests or fuzzers failed" >&2; exit 1; }
echo "test_all: sanitizer unit tests and fuzzers:"; tail -n 4 build/asan-ctest.log
phase_done "asan tests"

bash tools/build.sh release
phase_done "release build"
echo "test_all: ${phases%, } (release tests follow)"
cd build/release
ctest -j "$jobs" --output-on-failure --timeout 900
