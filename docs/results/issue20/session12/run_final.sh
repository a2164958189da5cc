set -uo pipefail
source .gpu-bin/common.sh
TT=100 gtest test_cuda_moe_grouped
TT=100 gtest test_cuda_moe
grep -B2 -A6 "Failure" $R/test_cuda_moe*.log | head -20
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
timeout 200 $F bench/configs/qwen3-30b-a3b --configs "fp8 bf16" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32 --out-dir $R/moe_qwen3 > $R/moe_qwen3.txt 2>&1; echo "sweep exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_qwen3.txt
FP8LM_BIN=/tmp/b OUT=$R/serve RUN_TIMEOUT=100 timeout 330 bash scripts/gpu_serve.sh --model bench/configs/qwen3-30b-a3b --configs "bf16 fp8" --concurrency "64" --input-len 512 --output-len 128; echo "serve exit $? $((SECONDS-t0))s"; cat $R/serve/summary.txt
left=$((570 - SECONDS + t0)); echo "left $left s"
[ $left -gt 60 ] && { timeout $left $F bench/configs/qwen3-30b-a3b --configs "fp8:block" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --out-dir $R/moe_qwen3_block > $R/moe_qwen3_block.txt 2>&1; echo "block sweep exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_qwen3_block.txt; }
echo "all done $((SECONDS-t0))s"
