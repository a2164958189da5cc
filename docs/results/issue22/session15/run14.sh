# High concurrency after the MoE and tensor-parallel work: the fixed binary (fp8lm) against 35b6940
# (issue 19's async-scheduling commit, whose 128/128 FP8 + FP8 KV run gave 25,775 output tok/s).
source .gpu-bin/common.sh
T() {  # name binary
  local name=$1 bin=$2 t=$SECONDS
  timeout 150 /tmp/b/$bin bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy \
    --quantization fp8 --kv-cache-dtype fp8 --num-prompts 4096 --input-len 128 --output-len 128 \
    --max-num-seqs 1024 --max-num-batched-tokens 16384 --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc $? $((SECONDS-t))s: $(grep -iE 'output tok/s|device busy|wait for the host' $R/$name.txt | tr -s ' ' | tr '\n' '|')"
}
for rep in 1 2; do T thr_fixed_r$rep fp8lm; T thr_35b6940_r$rep fp8lm_35b6940; done
