# Builds devcall_mla.sh's archive here (after scripts/build.sh --all): fp8lm, test_cuda_mla and
# test_cuda_moe with cuda_mla_v2.patch (MLA on CUDA with the context split, DeepSeek-V3's sigmoid
# routing in the MoE kernels), and fp8lm_v1 (cuda_mla_v1.patch: no split) for the same call's
# comparison; the tree and build/ are left as main.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PATH=/usr/local/cuda/bin:$PATH
if [[ -n $(git status --porcelain src tests bench) ]]; then
  echo "pack_mla.sh: src/, tests/ or bench/ has uncommitted changes (it checks them out at the end)" >&2; exit 2
fi
new=(src/backend/cuda/cuda_ops_mla.cpp src/backend/cuda/attention/mla_attention.h src/backend/cuda/attention/mla_attention.cu
     tests/cuda/test_cuda_mla.cpp)
s=$(mktemp -d)
trap 'git checkout -- src tests; rm -f "${new[@]}"; rm -rf $s; cmake build >/dev/null; ninja -C build fp8lm >/dev/null' EXIT
git apply docs/results/issue45/cuda_mla_v1.patch
cmake build >/dev/null
ninja -C build fp8lm && cp build/src/fp8lm $s/fp8lm_v1
git checkout -- src tests && rm -f "${new[@]}"
git apply docs/results/issue45/cuda_mla_v2.patch
ninja -C build fp8lm test_cuda_mla test_cuda_moe
bash scripts/pack_gpu_binaries.sh gpu-mla.tar.xz --only build/tests/test_cuda_mla build/tests/test_cuda_moe $s/fp8lm_v1
