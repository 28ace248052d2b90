#!/usr/bin/env bash
# Here (not on the GPU machine): packs a commit's tree (default HEAD) into .gl/commit_src.tar.gz, so a
# device call checks exactly that commit — the device gets a copy of the whole working tree, including
# other people's uncommitted edits, and its .git may be older than HEAD. Carry [".deps", ".gl"] and
# start the device command with:
#   mkdir -p /tmp/c && tar xzf .gl/commit_src.tar.gz -C /tmp/c && ln -sfn "$PWD/.deps" /tmp/c/.deps && cd /tmp/c
# usage: bash tools/gpu/pack_commit.sh [commit]
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:-HEAD}
mkdir -p .gl
git archive --format=tar.gz -o .gl/commit_src.tar.gz "$rev"
git rev-parse "$rev" >.gl/commit_src.rev
echo "packed $(cat .gl/commit_src.rev) ($(du -h .gl/commit_src.tar.gz | cut -f1)) into .gl/commit_src.tar.gz"
