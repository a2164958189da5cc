# Builds devcall_v12.sh's archive here (after scripts/build.sh --all): fp8lm and test_cuda_persistent
# = v12 (persistent_v12.patch: v11 and the tiles claimed at run time), fp8lm_v11 (persistent_v11.patch)
# for the same call's comparison; the tree and build/ are left as main. A second call beside
# devcall_s26.sh's (the two archives and the model do not fit one call's 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PATH=/usr/local/cuda/bin:$PATH
if [[ -n $(git status --porcelain src tests bench) ]]; then
  echo "pack_v12.sh: src/, tests/ or bench/ has uncommitted changes (it checks them out at the end)" >&2; exit 2
fi
s=$(mktemp -d)
trap 'git checkout -- src tests bench; ninja -C build fp8lm >/dev/null' EXIT
git apply docs/results/issue41/persistent_v11.patch
ninja -C build fp8lm && cp build/src/fp8lm $s/fp8lm_v11
git checkout -- src tests bench
git apply docs/results/issue41/persistent_v12.patch
ninja -C build fp8lm test_cuda_persistent
cp build/tests/test_cuda_persistent $s/
bash scripts/pack_gpu_binaries.sh gpu-v12.tar.xz --only $s/test_cuda_persistent $s/fp8lm_v11
rm -rf $s
mkdir -p .model
[[ -f .model/model.safetensors.xz ]] || xz -T2 -6 -c models/fp8lm-gutenberg-22m/model.safetensors > .model/model.safetensors.xz
