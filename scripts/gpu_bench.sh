#!/usr/bin/env bash
# Runs the cuBLASLt GEMM tests and the GEMM benchmark (issue 8) on a machine
# with a Hopper GPU and writes the results under $OUT (default ./gpu-results):
#   gpu_info.txt             nvidia-smi and cuBLASLt as found
#   test_cuda_gemm.{log,json} the GPU tests (GoogleTest output)
#   bench_cuda_gemm.md       the benchmark's tables (stdout)
#   bench_cuda_gemm.json     every configuration's numbers
#
#   bash scripts/gpu_bench.sh [--tests-only | --bench-only] [bench options, e.g. --models 8b]
#
# Uses the binaries in $FP8LM_GPU_BUILD (default build-gemm) when they exist —
# built elsewhere and carried, as the device machine's calls do:
#   cmake -S . -B build-gemm -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8LM_CUDA=ON
#   cmake --build build-gemm --target test_cuda_gemm bench_cuda_gemm
# and builds them there otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
build=${FP8LM_GPU_BUILD:-build-gemm}
mkdir -p "$out"

run_tests=1
run_bench=1
bench_args=()
for a in "$@"; do
  case "$a" in
    --tests-only) run_bench=0 ;;
    --bench-only) run_tests=0 ;;
    *) bench_args+=("$a") ;;
  esac
done

if [[ ! -x $build/tests/test_cuda_gemm || ! -x $build/bench/bench_cuda_gemm ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8LM_CUDA=ON
  cmake --build "$build" -j "$(nproc)" --target test_cuda_gemm bench_cuda_gemm
fi

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit --format=csv || true
  ls -l /usr/local/cuda/lib64/libcublasLt.so* 2>/dev/null || ldconfig -p | grep -i cublasLt || true
} 2>&1 | tee "$out/gpu_info.txt"

status=0
if ((run_tests)); then
  set +e
  "$build/tests/test_cuda_gemm" --gtest_output="json:$out/test_cuda_gemm.json" 2>&1 | tee "$out/test_cuda_gemm.log"
  ((PIPESTATUS[0] == 0)) || status=1
  set -e
  echo "test_cuda_gemm exit status: $status" | tee -a "$out/test_cuda_gemm.log"
fi
if ((run_bench)); then
  set +e
  "$build/bench/bench_cuda_gemm" --json "$out/bench_cuda_gemm.json" "${bench_args[@]}" | tee "$out/bench_cuda_gemm.md"
  ((PIPESTATUS[0] == 0)) || status=1
  set -e
fi
exit "$status"
