set -uo pipefail
source .gpu-bin/common.sh
TT=100 gtest test_cuda_moe_grouped
TT=200 gtest test_cuda_moe
grep -E "grouped GEMM|Failure" -A2 $R/test_cuda_moe.log | head -20
grep -E "Failure" -A4 $R/test_cuda_moe_grouped.log | head -20
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
Q=bench/configs/qwen3-30b-a3b; M=bench/configs/mixtral-8x7b
left() { echo $((560 - SECONDS + t0)); }
sweep() { local name=$1; shift; local l=$(left); [ $l -lt 50 ] && { echo "skip $name"; return; }
  timeout $l $F "$@" --out-dir /tmp/$name > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)|error" $R/$name.txt | head -12; }
sweep qwen3_final $Q --configs "fp8 fp8:block" --batch-sizes 1,8,64,128,256 --input-len 128 --output-len 32
FP8LM_CUDA_MOE_GEMM_MIN_ROWS=16 sweep qwen3_gemv128 $Q --configs "fp8" --batch-sizes 128 --input-len 128 --output-len 32
sweep mixtral_final $M --configs "fp8 fp8:block" --batch-sizes 64,256 --input-len 128 --output-len 32
l=$(left); [ $l -gt 40 ] && { timeout $l /tmp/b/fp8lm bench latency $Q --device cuda --load-format dummy --quantization fp8 --batch-size 16 --input-len 256 --output-len 4 --warmup 1 --iters 2 --profile > $R/profile_fp8_prefill.txt 2>&1; echo "profile exit $? $((SECONDS-t0))s"; grep -E "moe|gemm|TTFT|prefill tok" $R/profile_fp8_prefill.txt | head -12; }
l=$(left); [ $l -gt 230 ] && { FP8LM_BIN=/tmp/b OUT=$R/serve RUN_TIMEOUT=100 timeout $((l-10)) bash scripts/gpu_serve.sh --model $Q --configs "fp8 bf16" --concurrency "64" --input-len 512 --output-len 128; echo "serve exit $? $((SECONDS-t0))s"; cat $R/serve/summary.txt; rm -f $R/serve/*.json $R/serve/*.metrics; }
echo "all done $((SECONDS-t0))s"
