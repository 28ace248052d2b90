#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs dependencies, builds the release,
# sanitizer and fuzz flavours, runs the sanitizer unit tests and the fuzzers briefly, then the
# full release suite (unit, golden, e2e) last, so ctest's summary is the final line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs="${DEEPINFER_BUILD_JOBS:-$(nproc)}"

bash tools/build.sh asan
(cd build/asan && ctest -L unit -j "$jobs" --output-on-failure --timeout 600) >build/asan-ctest.log 2>&1 \
  || { cat build/asan-ctest.log; echo "test_all: sanitizer unit tests failed" >&2; exit 1; }
tail -n 3 build/asan-ctest.log

bash tools/build.sh fuzz
(cd build/fuzz && ctest -L fuzz -j "$jobs" --output-on-failure) >build/fuzz-ctest.log 2>&1 \
  || { cat build/fuzz-ctest.log; echo "test_all: fuzzers found a failure" >&2; exit 1; }
tail -n 3 build/fuzz-ctest.log

bash tools/build.sh release
cd build/release
ctest -j "$jobs" --output-on-failure --timeout 900
