#!/usr/bin/env bash
# Runs the FP8 decode GEMV's GPU test and benchmark (issue 8) on a Hopper machine and writes
# the logs and the JSON under $OUT (default ./gpu-results). Uses the binaries in
# ${BUILD:-build-gemv}/tests when present (built elsewhere and carried), else builds them.
#
#   bash scripts/gpu_gemv.sh [--sweep | --fit] [--no-test]
#
# --fit: only every plan, timed as the engine launches them (bench_cuda_gemv --fit), the input
# of tools/fit_gemv_plan.py.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
build=${BUILD:-build-gemv}
mkdir -p "$out"
sweep="" test=1
for a in "$@"; do
  case "$a" in
    --sweep) sweep=--sweep ;;
    --fit) sweep=--fit ;;
    --no-test) test=0 ;;
  esac
done
if [[ ! -x $build/tests/test_cuda_gemv || ! -x $build/tests/bench_cuda_gemv ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8LM_CUDA=ON -DFP8LM_BENCHMARKS=OFF || exit 1
  cmake --build "$build" -j "$(nproc)" --target test_cuda_gemv bench_cuda_gemv || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$out/gpu_info.txt"
status=0
if [[ $test == 1 ]]; then
  time "$build/tests/test_cuda_gemv" --gtest_output="json:$out/test_cuda_gemv.json" 2>&1 | tee "$out/test_cuda_gemv.log" | grep -vE "^\[ +(RUN|OK) +\]"
  status=${PIPESTATUS[0]}
  echo "test_cuda_gemv exit status: $status"
fi
time "$build/tests/bench_cuda_gemv" "$out/bench_cuda_gemv.json" $sweep 2>&1 | tee "$out/bench_cuda_gemv.log"
bstatus=${PIPESTATUS[0]}
echo "bench_cuda_gemv exit status: $bstatus"
[[ $status == 0 && $bstatus == 0 ]]
