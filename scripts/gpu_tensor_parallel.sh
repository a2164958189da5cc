#!/usr/bin/env bash
# Tensor parallelism on a machine with several GPUs (issue 22's must-show; nvidia-h200-x2 and
# larger): the GPU tests of the split (NCCL ranks against the split on one GPU and against the
# whole model, the shipped model on two GPUs against one), then `fp8lm bench latency` on
# Llama-3.1-70B's architecture with dummy weights — FP8 (per-channel × per-token) on 1, 2 and 4
# GPUs, BF16 on 2 and 4 — at batch 1 and 64, with --profile for the collectives' time per step
# and their share. Results under $OUT (default ./gpu-results): test_cuda_tensor_parallel.log,
# bench_70b_<weights>_tp<N>_b<batch>.{txt,json}, summary.txt.
#
#   bash scripts/gpu_tensor_parallel.sh [--tests-only | --bench-only] [--gpus "1 2 4"]
#       [--weights "fp8 bf16"] [--batches "1 64"] [--input-len 1024] [--output-len 128]
#
# A device call runs at most 600 s. Each 70B run loads the model (~22 s in FP8) and then runs
# its batch (batch 64 with --profile: ~2 minutes), so the whole matrix takes two or three calls,
# split by --gpus and --weights, e.g. `--gpus "1 2" --weights fp8`, then
# `--bench-only --gpus 4 --weights fp8`, then `--bench-only --gpus "2 4" --weights bf16`.
#
# Binaries: $FP8LM_BIN (a directory holding fp8lm and test_cuda_tensor_parallel), else build/src
# and build/tests. NCCL: $FP8LM_NCCL_LIBRARY, else the nvidia-nccl-cu13 of the python3 found
# (PyTorch's). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
run_tests=1 run_bench=1 gpus="1 2 4" weights_list="fp8 bf16" batches="1 64" input_len=1024 output_len=128
while (($#)); do
  case "$1" in
    --tests-only) run_bench=0 ;;
    --bench-only) run_tests=0 ;;
    --gpus) gpus=$2; shift ;;
    --weights) weights_list=$2; shift ;;
    --batches) batches=$2; shift ;;
    --input-len) input_len=$2; shift ;;
    --output-len) output_len=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for weights in $weights_list; do
  [[ $weights == fp8 || $weights == bf16 ]] || { echo "--weights: '$weights' is neither fp8 nor bf16" >&2; exit 2; }
done
bin_fp8lm=${FP8LM_BIN:+$FP8LM_BIN/fp8lm}
bin_fp8lm=${bin_fp8lm:-build/src/fp8lm}
test_dir=${FP8LM_BIN:-build/tests}
export NCCL_NVLS_ENABLE=0
if [[ -z ${FP8LM_NCCL_LIBRARY:-} ]]; then
  FP8LM_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  export FP8LM_NCCL_LIBRARY
fi
available=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
{ nvidia-smi --query-gpu=index,name,memory.total --format=csv; nvidia-smi topo -m; echo "NCCL: $FP8LM_NCCL_LIBRARY"; } \
  > "$out/gpu_info.txt" 2>&1
status=0
if ((run_tests)); then
  timeout 900 "$test_dir/test_cuda_tensor_parallel" > "$out/test_cuda_tensor_parallel.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/test_cuda_tensor_parallel.log" | sed 's/^/test_cuda_tensor_parallel: /' \
    | tee -a "$out/summary.txt"
fi
if ((run_bench)); then
  for tp in $gpus; do
    ((tp <= available)) || { echo "tp $tp: $available GPUs here, skipped" | tee -a "$out/summary.txt"; continue; }
    for weights in $weights_list; do
      [[ $weights == bf16 && $tp == 1 ]] && continue  # 141 GB of BF16 weights leave no KV cache on one H200
      quant=(); [[ $weights == fp8 ]] && quant=(--quantization fp8)
      for b in $batches; do
        name=bench_70b_${weights}_tp${tp}_b$b
        timeout 1200 "$bin_fp8lm" bench latency bench/configs/llama-3.1-70b --load-format dummy --device cuda \
          --tensor-parallel-size "$tp" "${quant[@]}" --batch-size "$b" --input-len "$input_len" \
          --output-len "$output_len" --iters 3 --profile --json "$out/$name.json" > "$out/$name.txt" 2>&1 || status=1
        echo "$name: $(grep -E 'TTFT ms|TPOT median ms|of which collectives' "$out/$name.txt" | tr -s ' ' | tr '\n' '|')" \
          | tee -a "$out/summary.txt"
      done
    done
  done
fi
exit "$status"
