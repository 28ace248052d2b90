#!/usr/bin/env bash
# The main job, from a fresh machine: install dependencies, build, make the bundled tiny model
# and run the engine on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh release deepinfer
./build/release/src/cli/deepinfer version
