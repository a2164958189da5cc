#!/usr/bin/env bash
# Runs fp8lm's GPU tests on a machine with a Hopper GPU and writes the results
# under $OUT (default ./gpu-results). Uses the binaries in build/ when they were
# built with the CUDA backend (they need only the NVIDIA driver: the CUDA
# runtime is linked statically); otherwise configures and builds them first.
#
#   bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"

if [[ ! -x build/tests/test_cuda_numerics ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8LM_CUDA=ON
  cmake --build build -j "$(nproc)"
fi

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
  build/src/fp8lm info
} 2>&1 | tee "$out/gpu_info.txt"

set +e
time build/tests/test_cuda_numerics --gtest_output="json:$out/test_cuda_numerics.json" \
  2>&1 | tee "$out/test_cuda_numerics.log"
status=${PIPESTATUS[0]}
set -e
echo "test_cuda_numerics exit status: $status" | tee -a "$out/test_cuda_numerics.log"
exit "$status"
