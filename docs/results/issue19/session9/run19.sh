set -uo pipefail
source .gpu-bin/common.sh
export FP8LM_CUDA_DECODE_PAIRS_MIN=0
T="/tmp/b/fp8lm bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy"
thr() { local name=$1 tmo=$2; shift 2; timeout $tmo $T "$@" --json $R/$name.json > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s: $(grep -iE 'output tok/s|device busy|idle|preempt|prefix|hit|error|elapsed' $R/$name.txt | tr -s ' ' | tr '\n' '|')"; }
thr thr128_fp8kv_pairs 60 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 4096 --input-len 128 --output-len 128 --max-num-seqs 1024 --max-num-batched-tokens 16384
FP8LM_BIN=/tmp/b OUT=$R/serve timeout 220 bash scripts/gpu_serve.sh --configs "bf16 fp8 fp8+kv" --concurrency 256 2>&1 | tail -4
cat $R/serve/summary.txt
echo "serve done $((SECONDS-t0))s"
thr thr1000_512_fp8kv 100 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 512 --input-len 1000 --output-len 1000 --max-num-seqs 512 --max-num-batched-tokens 16384
thr thr1000_1024_fp8kv 120 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 1024 --input-len 1000 --output-len 1000 --max-num-seqs 1024 --max-num-batched-tokens 16384
echo "all done $((SECONDS-t0))s"
