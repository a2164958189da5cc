set -uo pipefail
[[ -n "${t0:-}" ]] || source .gpu-bin/common.sh
T="/tmp/b/fp8lm bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy"
thr() { local name=$1 envs=$2 tmo=$3; shift 3; timeout $tmo env $envs $T "$@" --json $R/$name.json > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s: $(grep -iE 'output tok/s|device busy|idle' $R/$name.txt | tr -s ' ' | tr '\n' '|')"; }
S="--quantization fp8 --kv-cache-dtype fp8 --num-prompts 4096 --input-len 128 --output-len 128 --max-num-seqs 1024 --max-num-batched-tokens 16384"
thr thr128_fused X=1 70 $S
thr thr128_separate FP8LM_CUDA_FUSED_OUT_QUANT=0 70 $S
thr thr128_fused2 X=1 70 $S
thr thr128_separate2 FP8LM_CUDA_FUSED_OUT_QUANT=0 70 $S
L="/tmp/b/fp8lm bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy --quantization fp8 --kv-cache-dtype fp8 --batch-size 256 --input-len 1024 --output-len 32 --profile"
for v in 1 0; do timeout 80 env FP8LM_CUDA_FUSED_OUT_QUANT=$v $L --json $R/lat256_fused$v.json > $R/lat256_fused$v.txt 2>&1; echo "lat256 fused=$v exit $? $((SECONDS-t0))s"; grep -iE "attention|quantiz|decode.*tok/s|TPOT" $R/lat256_fused$v.txt | head -12; done
FP8LM_BIN=/tmp/b OUT=$R/attn timeout 150 bash scripts/gpu_attention.sh --forms "split keysplit" --test-forms none --batch 1,8,64,256 2>&1 | grep -E "^\| (1|8|64|256) " 
echo "all done $((SECONDS-t0))s"
