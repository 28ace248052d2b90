#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, builds the sanitizer flavour
# (clang ASan+UBSan with the libFuzzer targets) and runs its unit tests and each fuzzer briefly,
# then builds the release flavour and runs the full suite (unit, golden, e2e) last, so ctest's
# summary is the final line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs="${DEEPINFER_BUILD_JOBS:-$(nproc)}"

DEEPINFER_TEST_LABELS="unit;fuzz" bash tools/build.sh asan
(cd build/asan && ctest -L 'unit|fuzz' -j "$jobs" --output-on-failure --timeout 600) >build/asan-ctest.log 2>&1 \
  || { cat build/asan-ctest.log; echo "test_all: sanitizer unit tests or fuzzers failed" >&2; exit 1; }
echo "test_all: sanitizer unit tests and fuzzers:"; tail -n 4 build/asan-ctest.log

bash tools/build.sh release
cd build/release
ctest -j "$jobs" --output-on-failure --timeout 900
