set -uo pipefail
source .gpu-bin/common.sh
TT=120 gtest test_cuda_moe
grep -E "^\[ (batched|q|m|c)" $R/test_cuda_moe.log | head -20
grep -B2 -A6 "Failure" $R/test_cuda_moe.log | head -30
timeout 110 /tmp/b/fp8lm bench latency bench/configs/qwen3-30b-a3b --device cuda --load-format dummy --quantization fp8 --batch-size 1 --input-len 128 --output-len 32 --profile --json $R/moe_qwen3_fp8_b1_profile.json > $R/moe_qwen3_fp8_b1_profile.txt 2>&1; echo "qwen3 fp8 b1 profile exit $? $((SECONDS-t0))s"; grep -E "GPU peak|RSS peak|TPOT median|decode tok/s|decode weight|roofline|^  (moe|linear|attention)" $R/moe_qwen3_fp8_b1_profile.txt | head -24
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
timeout 170 $F bench/configs/qwen3-30b-a3b --configs "bf16 fp8 fp8:block" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32 --out-dir $R/moe_qwen3 > $R/moe_qwen3.txt 2>&1; echo "qwen3 sweep exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_qwen3.txt
timeout 150 $F bench/configs/llama-3.1-8b --configs "bf16 fp8 fp8+kv" --batch-sizes 1,8,32,64,128,256 --input-len 128 --output-len 128 --out-dir $R/llama_sweep > $R/llama_sweep.txt 2>&1; echo "llama sweep exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/llama_sweep.txt
left=$((390 - SECONDS + t0)); echo "left $left s"
[ $left -gt 60 ] && { timeout $left $F bench/configs/mixtral-8x7b --configs "bf16 fp8" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --out-dir $R/moe_mixtral > $R/moe_mixtral.txt 2>&1; echo "mixtral sweep exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)" $R/moe_mixtral.txt; }
echo "all done $((SECONDS-t0))s"
