#!/usr/bin/env bash
# Installs everything deepinfer needs to build and test on a fresh Debian machine. Idempotent:
# packages already present are skipped, so repeated runs cost seconds.
set -euo pipefail

apt_packages=(
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev zlib1g-dev libcpp-httplib-dev pybind11-dev
  libutf8proc-dev libgtest-dev libgmock-dev libbenchmark-dev libomp-dev python3 python3-pip python3-dev curl
)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages used by tests and tools (fixtures are committed; these check and drive them).
python_packages=(numpy safetensors jsonschema jinja2 openai requests tokenizers tqdm)
py_missing=()
for pkg in "${python_packages[@]}"; do
  python3 -c "import ${pkg}" 2>/dev/null || py_missing+=("$pkg")
done
# `pip install .` of the Python bindings builds through scikit-build-core (pyproject.toml).
python3 -c "import scikit_build_core" 2>/dev/null || py_missing+=(scikit-build-core)
if ((${#py_missing[@]})); then
  echo "install_deps: pip installing ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}"
fi
