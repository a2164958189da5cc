set -uo pipefail
source .gpu-bin/common.sh
T="/tmp/b/fp8lm bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy"
thr() { local name=$1 tmo=$2; shift 2; timeout $tmo $T "$@" --json $R/$name.json > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s: $(grep -iE 'output tok/s|device busy|idle|preempt|prefix|hit|error|elapsed' $R/$name.txt | tr -s ' ' | tr '\n' '|')"; }
export FP8LM_CUDA_DECODE_PAIRS_MIN=0
thr prefix_on 40 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 256 --input-len 1024 --output-len 128 --max-num-seqs 256 --max-num-batched-tokens 16384 --prefix-len 768 --enable-prefix-caching
thr prefix_off 40 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 256 --input-len 1024 --output-len 128 --max-num-seqs 256 --max-num-batched-tokens 16384 --prefix-len 768
FP8LM_CUDA_PROFILE=1 thr thrp128_fp8kv_pairs 50 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 2048 --input-len 128 --output-len 128 --max-num-seqs 1024 --max-num-batched-tokens 16384
L="/tmp/b/fp8lm bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy --input-len 1024 --warmup 1 --iters 2"
timeout 60 $L --quantization fp8 --kv-cache-dtype fp8 --batch-size 256 --output-len 64 --json $R/b256_fp8kv_pairs.json > $R/b256_fp8kv_pairs.txt 2>&1; echo "b256 pairs exit $? $((SECONDS-t0))s: $(grep -E 'decode tok/s' $R/b256_fp8kv_pairs.txt | tr -s ' ' | tr '\n' '|')"
FP8LM_CUDA_DECODE_PAIRS_MIN= timeout 60 $L --quantization fp8 --kv-cache-dtype fp8 --batch-size 256 --output-len 64 --json $R/b256_fp8kv_split.json > $R/b256_fp8kv_split.txt 2>&1; echo "b256 split exit $? $((SECONDS-t0))s: $(grep -E 'decode tok/s' $R/b256_fp8kv_split.txt | tr -s ' ' | tr '\n' '|')"
NCU="ncu --clock-control none --kernel-name regex:(flash_attention|warp_decode|pair_decode)_kernel --launch-skip 300 --launch-count 48 --metrics gpu__time_duration.sum,launch__grid_size --csv"
timeout 100 $NCU $T --quantization fp8 --kv-cache-dtype fp8 --num-prompts 1024 --input-len 128 --output-len 16 --max-num-seqs 1024 --max-num-batched-tokens 16384 > $R/ncu_mixed_pairs.csv 2>&1; echo "ncu mixed exit $? $((SECONDS-t0))s"
echo "all done $((SECONDS-t0))s"
