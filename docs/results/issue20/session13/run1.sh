set -uo pipefail
source .gpu-bin/common.sh
TT=120 gtest test_cuda_grouped_gemm
grep -E "^\[ (per|tensor|1x128)|Failure|error" -A3 $R/test_cuda_grouped_gemm.log | head -40
TT=200 gtest test_cuda_moe
grep -E "grouped GEMM|Failure" -A3 $R/test_cuda_moe.log | head -30
TT=100 gtest test_cuda_moe_grouped
TT=150 gtest test_cuda_gemv
TT=200 gtest test_cuda_model
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
Q=bench/configs/qwen3-30b-a3b
sweep() { local name=$1; shift; local left=$((560 - SECONDS + t0)); [ $left -lt 40 ] && { echo "skip $name"; return; }
  timeout $left $F "$@" --out-dir $R/$name > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)|error" $R/$name.txt | head -12; }
sweep gemm $Q --configs "fp8 fp8:block" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32
FP8LM_CUDA_MOE_GEMM=0 sweep nogemm $Q --configs "fp8 fp8:block" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32
FP8LM_CUDA_MOE_GEMM_MIN_PAIRS=64 sweep gemm64 $Q --configs "fp8" --batch-sizes 8,64 --input-len 128 --output-len 32
sweep mixtral bench/configs/mixtral-8x7b --configs "fp8" --batch-sizes 1,8,64 --input-len 128 --output-len 32
echo "all done $((SECONDS-t0))s"
