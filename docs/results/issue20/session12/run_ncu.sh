set -uo pipefail
source .gpu-bin/common.sh
TT=100 gtest test_cuda_moe_grouped
TT=100 gtest test_cuda_moe
timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv /tmp/b/fp8lm bench latency bench/configs/qwen3-30b-a3b --device cuda --load-format dummy --quantization fp8 --batch-size 1 --input-len 16 --output-len 3 --warmup 0 --iters 1 --max-num-batched-tokens 512 > $R/ncu_fp8_b1.csv 2> $R/ncu_fp8_b1.err; echo "ncu exit $? $((SECONDS-t0))s"; wc -l $R/ncu_fp8_b1.csv; tail -2 $R/ncu_fp8_b1.err; xz -9 $R/ncu_fp8_b1.csv
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
timeout 200 $F bench/configs/qwen3-30b-a3b --configs "fp8 bf16" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32 --out-dir $R/moe_qwen3 > $R/moe_qwen3.txt 2>&1; echo "sweep exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_qwen3.txt
echo "all done $((SECONDS-t0))s"
