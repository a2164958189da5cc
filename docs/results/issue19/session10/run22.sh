set -uo pipefail
source .gpu-bin/common.sh
export PATH=$PATH:/usr/local/cuda/bin
# async scheduling on the GPU: the engine's tokens equal the synchronous loop's; sampling ops still right
TT=120 gtest test_cuda_model --gtest_filter='CudaModelEngine.*:CudaModelTiming.*:CudaModelGenerate.*'
TT=60 gtest test_cuda_sampling
T="/tmp/b/fp8lm bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy"
thr() { local name=$1 tmo=$2; shift 2; timeout $tmo $T "$@" --json $R/$name.json > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s: $(grep -iE 'output tok/s|device busy|idle|preempt|elapsed|CPU s|error' $R/$name.txt | tr -s ' ' | tr '\n' '|')"; }
S="--quantization fp8 --kv-cache-dtype fp8 --num-prompts 4096 --input-len 128 --output-len 128 --max-num-seqs 1024 --max-num-batched-tokens 16384"
thr thr128_async 70 $S
thr thr128_sync 70 $S --no-async-scheduling
FP8LM_BIN=/tmp/b OUT=$R/serve timeout 230 bash scripts/gpu_serve.sh --configs "bf16 fp8 fp8+kv" --concurrency 256 2>&1 | tail -4
cat $R/serve/summary.txt
echo "serve done $((SECONDS-t0))s"
thr thr1000_512_async 110 --quantization fp8 --kv-cache-dtype fp8 --num-prompts 512 --input-len 1000 --output-len 1000 --max-num-seqs 512 --max-num-batched-tokens 16384
echo "all done $((SECONDS-t0))s"
