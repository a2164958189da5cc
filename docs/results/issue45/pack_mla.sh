# Builds devcall_mla.sh's archive here (after scripts/build.sh --all): fp8lm, test_cuda_mla and
# test_cuda_moe with cuda_mla_v1.patch (MLA on CUDA, DeepSeek-V3's sigmoid routing in the MoE
# kernels); the tree and build/ are left as main.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PATH=/usr/local/cuda/bin:$PATH
if [[ -n $(git status --porcelain src tests bench) ]]; then
  echo "pack_mla.sh: src/, tests/ or bench/ has uncommitted changes (it checks them out at the end)" >&2; exit 2
fi
new=(src/backend/cuda/cuda_ops_mla.cpp src/backend/cuda/attention/mla_attention.h src/backend/cuda/attention/mla_attention.cu
     tests/cuda/test_cuda_mla.cpp)
trap 'git checkout -- src tests; rm -f "${new[@]}"; cmake build >/dev/null; ninja -C build fp8lm >/dev/null' EXIT
git apply docs/results/issue45/cuda_mla_v1.patch
cmake build >/dev/null
ninja -C build fp8lm test_cuda_mla test_cuda_moe
bash scripts/pack_gpu_binaries.sh gpu-mla.tar.xz --only build/tests/test_cuda_mla build/tests/test_cuda_moe
