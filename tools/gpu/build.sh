#!/usr/bin/env bash
# Builds deepinfer on the GPU machine from the carried .deps/ (see collect_deps.sh).
# usage (on the device, in the repo root): bash tools/gpu/build.sh [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/../.."
deps="$PWD/.deps/usr"
[ -d "$deps" ] || { echo "tools/gpu/build.sh: .deps/ missing: run tools/gpu/collect_deps.sh here and carry .deps" >&2; exit 1; }
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$deps;$deps/lib/x86_64-linux-gnu/cmake;$deps/share/cmake;$deps/lib/cmake" \
  -DCMAKE_CUDA_COMPILER="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}" >/dev/null
ninja -C build/gpu -j "$(nproc)" "$@"
