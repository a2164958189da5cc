set -uo pipefail
source .gpu-bin/common.sh
TT=150 gtest test_cuda_moe
grep -E "^\[ (q|m|h|c|b)" $R/test_cuda_moe.log | head -20
grep -B2 -A6 "Failure" $R/test_cuda_moe.log | head -40
bash .gpu-bin/runB.sh
timeout 200 /tmp/b/fp8lm bench sweep bench/configs/qwen3-30b-a3b --device cuda --load-format dummy --configs "bf16 fp8" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --out-dir $R/moe_sweep > $R/moe_sweep.txt 2>&1; echo "moe sweep exit $? $((SECONDS-t0))s"; tail -15 $R/moe_sweep.txt
