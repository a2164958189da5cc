set -uo pipefail
source .gpu-bin/common.sh
TT=100 gtest test_cuda_moe_grouped
TT=100 gtest test_cuda_moe
grep -E "^\[ (grouped)" $R/test_cuda_moe.log | head -8
grep -B2 -A6 "Failure" $R/test_cuda_moe.log | head -20
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
for plan in simple model; do
FP8LM_CUDA_MOE_GROUPED_PLAN=$plan timeout 100 $F bench/configs/qwen3-30b-a3b --configs "fp8" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --out-dir $R/moe_qwen3_$plan > $R/moe_qwen3_$plan.txt 2>&1; echo "sweep $plan exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_qwen3_$plan.txt
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
timeout 240 $NCU --clock-control none --metrics gpu__time_duration.sum --csv /tmp/b/fp8lm bench latency bench/configs/qwen3-30b-a3b --device cuda --load-format dummy --quantization fp8 --batch-size 1 --input-len 16 --output-len 3 --warmup 0 --iters 1 --max-num-batched-tokens 512 --max-num-seqs 1 > $R/ncu_fp8_b1.csv 2> $R/ncu_fp8_b1.err; echo "ncu exit $? $((SECONDS-t0))s"; wc -l $R/ncu_fp8_b1.csv; tail -3 $R/ncu_fp8_b1.err
xz -9 $R/ncu_fp8_b1.csv
echo "all done $((SECONDS-t0))s"
