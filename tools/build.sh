#!/usr/bin/env bash
# Configures and builds one flavour of deepinfer: release (default), asan or fuzz.
# usage: tools/build.sh [release|asan|fuzz] [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-release}"; shift || true
jobs="${DEEPINFER_BUILD_JOBS:-$(nproc)}"
case "$flavour" in
  release) dir=build/release; args=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan)    dir=build/asan; args=(-DCMAKE_BUILD_TYPE=Debug -DDEEPINFER_SANITIZE=address,undefined
                                 -DDEEPINFER_CUDA=OFF -DDEEPINFER_BUILD_BENCH=OFF) ;;
  fuzz)    dir=build/fuzz; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang
                                 -DCMAKE_CXX_COMPILER=clang++ -DDEEPINFER_FUZZ=ON -DDEEPINFER_CUDA=OFF
                                 -DDEEPINFER_BUILD_BENCH=OFF -DDEEPINFER_BUILD_TESTS=ON) ;;
  *) echo "usage: tools/build.sh [release|asan|fuzz] [targets...]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
ninja -C "$dir" -j "$jobs" "$@"
