#!/usr/bin/env bash
# Configures and builds one flavour of deepinfer: release (gcc, CUDA when nvcc is found; the
# -Werror gate) or asan (clang, ASan + UBSan, the libFuzzer targets, CPU only).
# usage: tools/build.sh [release|asan] [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-release}"; shift || true
jobs="${DEEPINFER_BUILD_JOBS:-$(nproc)}"
case "$flavour" in
  release) dir=build/release; args=(-DCMAKE_BUILD_TYPE=Release) ;;
  # -O1 -g1: sanitizer builds compile most of CI's time away; line tables suffice for reports.
  asan)    dir=build/asan; args=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" -DCMAKE_C_COMPILER=clang
                                 -DCMAKE_CXX_COMPILER=clang++ -DDEEPINFER_SANITIZE=address,undefined
                                 -DDEEPINFER_FUZZ=ON -DDEEPINFER_WERROR=OFF -DDEEPINFER_CUDA=OFF
                                 -DDEEPINFER_BUILD_BENCH=OFF
                                 # an ASan-built extension cannot load into a plain python3
                                 -DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON) ;;
  *) echo "usage: tools/build.sh [release|asan] [targets...]" >&2; exit 2 ;;
esac
# DEEPINFER_TEST_LABELS="unit;fuzz" builds only the tests of those labels (tools/test_all.sh uses
# it for the sanitizer flavour); always passed, so an unset variable restores the full build.
# DEEPINFER_FUZZ_SECONDS: how long ctest runs each fuzzer (default 20).
args+=("-DDEEPINFER_TEST_LABELS=${DEEPINFER_TEST_LABELS:-}" "-DDEEPINFER_FUZZ_SECONDS=${DEEPINFER_FUZZ_SECONDS:-20}")
cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
ninja -C "$dir" -j "$jobs" "$@"
