#!/usr/bin/env bash
# Copies the headers, CMake configs and libraries of our Debian build dependencies into .deps/
# (git-ignored), keeping their /usr layout, so they can travel to the GPU machine, which has the
# toolchain but none of our -dev packages. There: cmake -DCMAKE_PREFIX_PATH=$PWD/.deps/usr ...
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/install_deps.sh >/dev/null
packages=(nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libpcre2-dev libgtest-dev libgmock-dev
          libbenchmark-dev libbenchmark1debian libcpp-httplib-dev libcpp-httplib0.11 pybind11-dev
          libutf8proc-dev libutf8proc2)
rm -rf .deps && mkdir -p .deps
for pkg in "${packages[@]}"; do
  dpkg -L "$pkg" | while read -r path; do
    case "$path" in */share/doc/*|*/man/*|*/lintian/*) continue ;; esac
    if [ -f "$path" ] || [ -L "$path" ]; then
      mkdir -p ".deps$(dirname "$path")"
      cp -a "$path" ".deps$path"
    fi
  done
done
du -sh .deps
