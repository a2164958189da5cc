# Sourced by the run*.sh scripts on the device: unpacks the binaries and the shipped model,
# sets the library path, and defines gtest (a GPU test program under a timeout, its log in $R).
export PATH=$PATH:/usr/local/cuda/bin
R=${OUT:-/tmp/out}; mkdir -p "$R"
t0=$SECONDS
mkdir -p /tmp/b && for t in .gpu-bin/*.tar.xz; do tar xJf "$t" -C /tmp/b; done
lt=$(find / -xdev -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/b:${lt:+$(dirname "$lt"):}${LD_LIBRARY_PATH:-}
[[ -s models/fp8lm-gutenberg-22m/model.safetensors || ! -f .gpu-bin/model.safetensors.xz ]] || xz -dc .gpu-bin/model.safetensors.xz > models/fp8lm-gutenberg-22m/model.safetensors
echo "setup $((SECONDS-t0))s, cublasLt: $lt"
gtest() {
  local name=$1; shift
  timeout "${TT:-120}" /tmp/b/"$name" "$@" > "$R/$name${SUF:-}.log" 2>&1
  echo "$name exit $? $((SECONDS-t0))s: $(grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' "$R/$name${SUF:-}.log" | head -8 | tr '\n' '|')"
}
