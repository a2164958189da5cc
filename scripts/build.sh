#!/usr/bin/env bash
# Sets fp8lm up on a fresh Debian machine: installs the Debian packages it
# builds with (when missing) and builds it into build/, through ccache.
#
#   bash scripts/build.sh           # the fp8lm program alone, CPU backend: what the README's first command runs
#   bash scripts/build.sh --cuda    # the fp8lm program with the CUDA backend (needs nvcc)
#   bash scripts/build.sh --all     # every target (tests, benchmarks), the CUDA backend when nvcc is there:
#                                   # what the test command (scripts/test.sh) builds
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=OFF targets=(--target fp8lm)
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=ON ;;
    --all) cuda=AUTO targets=() ;;
    *) echo "scripts/build.sh: unknown option '$arg' (--cuda, --all)" >&2; exit 2 ;;
  esac
done

step() { printf '\n==== %s\n' "$*"; }
jobs=$(nproc)

step "Debian packages"
packages=(cmake ninja-build g++ git python3 python3-venv python3-pip libgtest-dev libgmock-dev
          libbenchmark-dev libcli11-dev nlohmann-json3-dev clang libclang-rt-14-dev
          libpcre2-dev libutf8proc-dev pkg-config libcpp-httplib-dev ccache)
bash scripts/install_packages.sh "${packages[@]}"

# The CUDA backend's FP8 GEMMs use CUTLASS's headers, shipped in PyPI's nvidia-cutlass (pinned):
# fetched once into .deps/cutlass when a CUDA compiler is there (cmake/Cuda.cmake looks for nvcc
# on PATH and in /usr/local/cuda).
cutlass_version=4.2.0.0
if [[ $cuda != OFF ]] && { command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  step "CUTLASS headers (nvidia-cutlass==$cutlass_version, .deps/cutlass)"
  if [[ $(cat .deps/cutlass/VERSION 2>/dev/null) != "$cutlass_version" ]]; then
    rm -rf .deps/cutlass .deps/wheels
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d .deps/wheels \
      "nvidia-cutlass==$cutlass_version"
    python3 - "$cutlass_version" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(".deps/wheels").glob("nvidia_cutlass-*.whl"))
parts = {"cutlass_library/source/include/": "include/", "cutlass_library/source/tools/util/include/": "util/include/"}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for src, dst in parts.items():
            if name.startswith(src) and not name.endswith("/"):
                out = pathlib.Path(".deps/cutlass") / dst / name[len(src):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
pathlib.Path(".deps/cutlass/VERSION").write_text(sys.argv[1])
PY
    rm -rf .deps/wheels
  fi
  echo "CUTLASS $cutlass_version headers in .deps/cutlass"
fi

step "Build (build/: ${targets[*]:-every target}, CUDA backend $cuda)"
# ccache: a rebuild (another flavour of this script, a branch switched back) recompiles nothing it compiled before.
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
command -v ccache >/dev/null 2>&1 || launcher=()
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8LM_CUDA="$cuda" "${launcher[@]}"
cmake --build build -j "$jobs" "${targets[@]}"

