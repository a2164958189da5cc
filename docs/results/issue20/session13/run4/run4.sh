set -uo pipefail
source .gpu-bin/common.sh
TT=100 gtest test_cuda_moe_grouped
TT=120 gtest test_cuda_moe
TT=150 gtest test_cuda_model_kernels

for f in test_cuda_moe_grouped test_cuda_moe test_cuda_model_kernels; do grep -E "Failure" -A4 $R/$f.log | head -12; done
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
Q=bench/configs/qwen3-30b-a3b; M=bench/configs/mixtral-8x7b
left() { echo $((430 - SECONDS + t0)); }
sweep() { local name=$1; shift; local l=$(left); [ $l -lt 45 ] && { echo "skip $name"; return; }
  timeout $l $F "$@" --out-dir /tmp/$name > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)|error" $R/$name.txt | head -12; }
sweep fused $Q --configs "fp8 fp8:block bf16" --batch-sizes 1,8 --input-len 128 --output-len 32
FP8LM_CUDA_MOE_COMBINE_IN_NORM=0 FP8LM_CUDA_MOE_SILU_IN_DOWN=0 sweep unfused $Q --configs "fp8" --batch-sizes 1,8 --input-len 128 --output-len 32
sweep mixtral_fp8_small $M --configs "fp8" --batch-sizes 1,8 --input-len 128 --output-len 32
sweep mixtral_bf16_64 $M --configs "bf16" --batch-sizes 64 --input-len 128 --output-len 32
echo "all done $((SECONDS-t0))s"
