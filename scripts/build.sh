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

# Headers the CUDA backend builds against, from pinned PyPI wheels (their libraries are not
# linked): CUTLASS's C++ templates (nvidia-cutlass) for the FP8 GEMMs, and nccl.h
# (nvidia-nccl-cu13) for tensor parallelism over GPUs, whose library is opened at run time.
# Fetched once into .deps/ when a CUDA compiler is there (cmake/Cuda.cmake looks for nvcc on
# PATH and in /usr/local/cuda).
# fetch_headers DIR WHEEL==VERSION PREFIX=DEST...: the wheel's files under each PREFIX into DIR/DEST.
fetch_headers() {
  local dir=$1 pin=$2; shift 2
  if [[ $(cat "$dir/VERSION" 2>/dev/null) == "$pin" ]]; then echo "$pin headers in $dir"; return; fi
  rm -rf "$dir" .deps/wheels
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d .deps/wheels "$pin"
  python3 - "$dir" "$pin" "$@" <<'PY'
import pathlib, sys, zipfile
out_dir, pin, maps = pathlib.Path(sys.argv[1]), sys.argv[2], [m.split("=", 1) for m in sys.argv[3:]]
wheel = next(pathlib.Path(".deps/wheels").glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        for src, dst in maps:
            if name.startswith(src) and not name.endswith("/"):
                out = out_dir / dst / name[len(src):]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
(out_dir / "VERSION").write_text(pin)
PY
  rm -rf .deps/wheels
  echo "$pin headers in $dir"
}
if [[ $cuda != OFF ]] && { command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  step "CUDA backend headers (.deps/cutlass, .deps/nccl)"
  fetch_headers .deps/cutlass nvidia-cutlass==4.2.0.0 \
    cutlass_library/source/include/=include/ cutlass_library/source/tools/util/include/=util/include/
  fetch_headers .deps/nccl nvidia-nccl-cu13==2.28.9 nvidia/nccl/include/nccl.h=include/nccl.h
fi

# xgrammar's C++ core (structured outputs: JSON schemas, regexes and grammars → token masks), from
# its pinned PyPI sdist (url and sha256 below), unpacked once into .deps/xgrammar; cmake/Xgrammar.cmake
# compiles its sources into one static library (its own CMakeLists builds Python bindings by default).
fetch_sdist() {  # fetch_sdist DIR URL SHA256
  local dir=$1 url=$2 sha=$3
  if [[ $(cat "$dir/SOURCE" 2>/dev/null) == "$url" ]]; then echo "$(basename "$url") in $dir"; return; fi
  rm -rf "$dir"
  python3 - "$dir" "$url" "$sha" <<'PY'
import hashlib, io, pathlib, sys, tarfile, urllib.request
out_dir, url, sha = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
data = urllib.request.urlopen(url, timeout=300).read()
got = hashlib.sha256(data).hexdigest()
if got != sha:
    sys.exit(f"{url}: sha256 {got}, expected {sha}")
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    top = t.getnames()[0].split("/")[0]
    for m in t.getmembers():
        if not (m.isfile() or m.isdir()) or ".." in m.name.split("/"):
            continue
        m.name = m.name[len(top):].lstrip("/") or "."
        t.extract(m, out_dir, filter="data") if sys.version_info >= (3, 12) else t.extract(m, out_dir)
(out_dir / "SOURCE").write_text(url)
PY
  echo "$(basename "$url") in $dir"
}
step "xgrammar sources (.deps/xgrammar)"
fetch_sdist .deps/xgrammar \
  https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-0.2.9.tar.gz \
  87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90

step "Build (build/: ${targets[*]:-every target}, CUDA backend $cuda)"
# ccache: a rebuild (another flavour of this script, a branch switched back) recompiles nothing it compiled before.
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
command -v ccache >/dev/null 2>&1 || launcher=()
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8LM_CUDA="$cuda" "${launcher[@]}"
cmake --build build -j "$jobs" "${targets[@]}"

