set -uo pipefail
source .gpu-bin/common.sh
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
timeout 70 $F bench/configs/qwen3-30b-a3b --configs "bf16" --batch-sizes 128,256 --input-len 128 --output-len 32 --out-dir $R/moe_qwen3_bf16_large > $R/moe_qwen3_bf16_large.txt 2>&1; echo "qwen3 bf16 exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_qwen3_bf16_large.txt
timeout 230 $F bench/configs/mixtral-8x7b --configs "fp8 bf16" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --out-dir $R/moe_mixtral > $R/moe_mixtral.txt 2>&1; echo "mixtral exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)|MiB" $R/moe_mixtral.txt | head
echo "all done $((SECONDS-t0))s"
