set -uo pipefail
source .gpu-bin/common.sh
export PATH=$PATH:/usr/local/cuda/bin
TT=150 gtest test_cuda_attention
FP8LM_CUDA_DECODE_PAIRS_MIN=0 TT=150 gtest test_cuda_attention
T="/tmp/b/fp8lm bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy"
thr() { local name=$1 envs=$2; shift 2; timeout 70 env $envs $T "$@" --json $R/$name.json > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s: $(grep -iE 'output tok/s|device busy|idle' $R/$name.txt | tr -s ' ' | tr '\n' '|')"; }
S="--quantization fp8 --kv-cache-dtype fp8 --num-prompts 4096 --input-len 128 --output-len 128 --max-num-seqs 1024 --max-num-batched-tokens 16384"
thr thr128_default X=1 $S
thr thr128_prefill3 FP8LM_CUDA_PREFILL_FP8_CTAS=3 $S
NCU="ncu --clock-control none --kernel-name regex:flash_attention_kernel --launch-skip 301 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats"
for c in 1 3; do timeout 100 env FP8LM_CUDA_PREFILL_FP8_CTAS=$c $NCU $T --quantization fp8 --kv-cache-dtype fp8 --num-prompts 1024 --input-len 128 --output-len 16 --max-num-seqs 1024 --max-num-batched-tokens 16384 > $R/ncu_flash_mixed_ctas$c.txt 2>&1; echo "ncu flash ctas$c exit $? $((SECONDS-t0))s"; grep -E "^\s+(Duration|Achieved Occupancy|Registers Per|Issued Warp|No Eligible)" $R/ncu_flash_mixed_ctas$c.txt; done
echo "all done $((SECONDS-t0))s"
# the key-split FP8 kernel's code changed in the review (shared gather: spills 112 -> 100 bytes): re-time it
FP8LM_BIN=/tmp/b OUT=$R/attn timeout 200 bash scripts/gpu_attention.sh --forms "split keysplit" --test-forms none --batch 1,2,4,8,16,32,64,128,256 2>&1 | grep -E "^\| (8|64|256) " 
