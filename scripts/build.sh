#!/usr/bin/env bash
# Sets fp8lm up on a fresh Debian machine: installs the Debian packages it
# builds with (when missing) and builds it into build/ (with the CUDA backend
# when nvcc is there). The test command (scripts/test.sh) starts with this.
#
#   bash scripts/build.sh && build/src/fp8lm --help
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==== %s\n' "$*"; }
jobs=$(nproc)

step "Debian packages"
packages=(cmake ninja-build g++ git python3 python3-venv libgtest-dev libgmock-dev
          libbenchmark-dev libcli11-dev nlohmann-json3-dev clang libclang-rt-14-dev
          libpcre2-dev libutf8proc-dev pkg-config libcpp-httplib-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi
echo "all of: ${packages[*]}"

step "Build (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs"

