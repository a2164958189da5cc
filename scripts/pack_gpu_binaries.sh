#!/usr/bin/env bash
# Packs the CUDA build's programs for a GPU machine that has the NVIDIA driver and CUDA's
# libraries but none of the Debian packages fp8lm builds with: fp8lm, the GPU test programs
# and the GPU benchmarks of build/, stripped, with the shared libraries they need that such a
# machine lacks (cpp-httplib, PCRE2, utf8proc, Brotli), in one xz archive (~8 MB instead of
# ~60 MB of binaries). On the GPU machine:
#
#   mkdir -p /tmp/fp8lm-bin && tar xJf ARCHIVE -C /tmp/fp8lm-bin
#   export LD_LIBRARY_PATH=/tmp/fp8lm-bin:<the directory of libcublasLt.so.13>:$LD_LIBRARY_PATH
#   FP8LM_BIN=/tmp/fp8lm-bin bash scripts/gpu_model.sh --tests-only
#
#   bash scripts/pack_gpu_binaries.sh ARCHIVE.tar.xz [EXTRA_PROGRAM...]
#   bash scripts/pack_gpu_binaries.sh ARCHIVE.tar.xz --only [PROGRAM...]   # fp8lm and these alone
set -euo pipefail
cd "$(dirname "$0")/.."
archive=${1:?usage: scripts/pack_gpu_binaries.sh ARCHIVE.tar.xz [--only] [PROGRAM...]}
shift
only=0
if [[ ${1:-} == --only ]]; then only=1; shift; fi
[[ -x build/src/fp8lm ]] || { echo "build/src/fp8lm not found: build with -DFP8LM_CUDA=ON first" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

programs=(build/src/fp8lm)
candidates=(build/tests/test_cuda_* build/tests/bench_cuda_* build/bench/bench_cuda_* "$@")
[[ $only == 1 ]] && candidates=("$@")
for p in "${candidates[@]}"; do
  [[ -f $p && -x $p ]] && programs+=("$p")
done
for p in "${programs[@]}"; do strip -o "$stage/$(basename "$p")" "$p"; done

# The libraries a CUDA image has no package for; glibc, libstdc++, OpenSSL, zlib and CUDA's
# own libraries (cuBLASLt) are expected there.
wanted='libcpp-httplib|libpcre2-8|libutf8proc|libbrotli'
for p in "${programs[@]}"; do
  ldd "$p" | awk -v re="$wanted" '$1 ~ re && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do cp -L "$lib" "$stage/"; done

tar cJf "$archive" -C "$stage" .
echo "$archive: $(ls "$stage" | wc -l) files, $(du -h "$archive" | cut -f1)"
