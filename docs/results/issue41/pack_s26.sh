# Builds devcall_s26.sh's archive here (after scripts/build.sh --cuda and cmake of the tests):
# fp8lm_v9 = main's build, fp8lm and test_cuda_persistent = v11 (persistent_v11.patch: v10 and the
# block / per-tensor / W8A16 schemes), fp8lm_nowait = v11 without the phase waits (a timing
# diagnostic: its results are wrong),
# bench_cuda_weight_stream; the tree and build/ are left as main. Writes .model/model.safetensors.xz
# (the shipped model's weights, for every persistent test) and .so/tokenizer.json.xz (issue 43's
# 129k vocabulary) when missing. Shrink the tree before the call: tree and carried paths ≤ 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PATH=/usr/local/cuda/bin:$PATH
k=src/backend/cuda/persistent/decode_kernel.cu
if [[ -n $(git status --porcelain src tests bench) ]]; then
  echo "pack_s26.sh: src/, tests/ or bench/ has uncommitted changes (it checks them out at the end)" >&2; exit 2
fi
s=$(mktemp -d)
ninja -C build fp8lm bench_cuda_weight_stream
cp build/src/fp8lm $s/fp8lm_v9
trap 'git checkout -- src tests bench; ninja -C build fp8lm >/dev/null' EXIT
git apply docs/results/issue41/persistent_v11.patch
ninja -C build fp8lm test_cuda_persistent bench_cuda_weight_stream
cp build/src/fp8lm $s/fp8lm_v11 && cp build/tests/test_cuda_persistent $s/
python3 - "$k" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = "  if (threadIdx.x == 0) {\n    int spins = 0;"
assert old in s
open(p, "w").write(s.replace(old, "  if (threadIdx.x == 0 && false) {  // diagnostic: no phase waits\n    int spins = 0;"))
PY
ninja -C build fp8lm && cp build/src/fp8lm $s/fp8lm_nowait
# pack_gpu_binaries.sh names build/src/fp8lm "fp8lm": v11 there while packing.
cp $s/fp8lm_v11 build/src/fp8lm
bash scripts/pack_gpu_binaries.sh gpu-persistent.tar.xz --only $s/test_cuda_persistent $s/fp8lm_v9 $s/fp8lm_nowait \
  build/bench/bench_cuda_weight_stream
rm -rf $s
mkdir -p .model .so
[[ -f .model/model.safetensors.xz ]] || xz -T2 -6 -c models/fp8lm-gutenberg-22m/model.safetensors > .model/model.safetensors.xz
[[ -f .so/tokenizer.json.xz ]] || xz -T2 -6 -c ../shared/data/hf/deepseek-ai__DeepSeek-V3/tokenizer.json > .so/tokenizer.json.xz
