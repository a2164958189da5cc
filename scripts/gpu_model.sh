#!/usr/bin/env bash
# The whole model on the H200 (issue 9): the GPU tests of the CUDA backend's
# model kernels, paged attention and the model against the CPU backend, then
# `fp8lm bench latency` on Llama-3.1-8B's architecture with dummy weights,
# BF16 vs FP8 per-channel vs FP8 block vs FP8 + FP8 KV cache. Results under
# $OUT (default ./gpu-results): *.log / *.json per test program, and
# bench_<weights>_<kv>_b<batch>.{txt,json} per benchmark run.
#
#   bash scripts/gpu_model.sh [--tests-only | --bench-only] [--batches "1 8 32 128"]
#       [--input-len 1024] [--output-len 256] [--configs "bf16 fp8 fp8:block fp8+kv"]
#
# Binaries: $FP8LM_BIN (a directory holding fp8lm and the test programs), else
# build/src and build/tests (configure with -DFP8LM_CUDA=ON).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
run_tests=1 run_bench=1
batches="1 8 32 128" input_len=1024 output_len=256 configs="bf16 fp8 fp8:block fp8+kv"
while (($#)); do
  case "$1" in
    --tests-only) run_bench=0 ;;
    --bench-only) run_tests=0 ;;
    --batches) batches=$2; shift ;;
    --input-len) input_len=$2; shift ;;
    --output-len) output_len=$2; shift ;;
    --configs) configs=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
bin_fp8lm=${FP8LM_BIN:+$FP8LM_BIN/fp8lm}
bin_fp8lm=${bin_fp8lm:-build/src/fp8lm}
test_dir=${FP8LM_BIN:-build/tests}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$out/gpu_info.txt" 2>&1
status=0
if ((run_tests)); then
  for t in test_cuda_model_kernels test_cuda_attention test_cuda_model; do
    [[ -x $test_dir/$t ]] || { echo "$t: not built" | tee -a "$out/summary.txt"; status=1; continue; }
    timeout 300 "$test_dir/$t" --gtest_output="json:$out/$t.json" > "$out/$t.log" 2>&1
    rc=$?
    echo "$t exit $rc: $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | tr '\n' ' ')" | tee -a "$out/summary.txt"
    ((rc == 0)) || status=1
  done
fi
if ((run_bench)); then
  for cfg in $configs; do
    args=(--device cuda --load-format dummy)
    case "$cfg" in
      bf16) ;;
      fp8) args+=(--quantization fp8) ;;
      fp8:block) args+=(--quantization fp8:block) ;;
      fp8+kv) args+=(--quantization fp8 --kv-cache-dtype fp8) ;;
      *) args+=(--quantization "$cfg") ;;
    esac
    for b in $batches; do
      name="bench_${cfg//:/_}_b$b"
      name=${name//+/_}
      timeout "${RUN_TIMEOUT:-400}" "$bin_fp8lm" bench latency bench/configs/llama-3.1-8b "${args[@]}" --batch-size "$b" \
        --input-len "$input_len" --output-len "$output_len" --warmup 1 --iters "${ITERS:-2}" --json "$out/$name.json" \
        > "$out/$name.txt" 2>&1
      echo "$name exit $?" | tee -a "$out/summary.txt"
    done
  done
fi
exit "$status"
