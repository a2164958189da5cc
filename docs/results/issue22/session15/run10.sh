# Single-GPU path unchanged? fp8lm at HEAD (tensor parallelism in) against 03ca8d0 (the commit
# before issue 22's runtime) and 64e343a (issue 18's last binary), alternated in one call.
source .gpu-bin/common.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader
B() {  # name binary model args...
  local name=$1 bin=$2; shift 2
  local t=$SECONDS
  timeout 200 /tmp/b/$bin bench latency "$@" --device cuda --load-format dummy --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc $? $((SECONDS-t))s @$SECONDS: $(grep -E 'TTFT ms|TPOT median ms|decode weight GB' $R/$name.txt | tr -s ' ' | tr '\n' '|')"
}
c8=bench/configs/llama-3.1-8b c70=bench/configs/llama-3.1-70b
for rep in 1 2; do
  for bin in fp8lm fp8lm_03ca8d0 fp8lm_64e343a; do
    B 8b_fp8_b1_${bin}_r$rep $bin $c8 --quantization fp8 --batch-size 1 --input-len 1024 --output-len 256 --iters 3
  done
done
for bin in fp8lm fp8lm_03ca8d0 fp8lm_64e343a; do
  B 8b_fp8_b64_$bin $bin $c8 --quantization fp8 --batch-size 64 --input-len 1024 --output-len 128 --iters 3
done
for bin in fp8lm fp8lm_03ca8d0; do
  B 8b_bf16_b1_$bin $bin $c8 --batch-size 1 --input-len 1024 --output-len 256 --iters 3
done
for bin in fp8lm fp8lm_03ca8d0 fp8lm_64e343a; do
  ((SECONDS < 420)) || { echo "70b $bin skipped at ${SECONDS}s"; continue; }
  B 70b_fp8_b1_$bin $bin $c70 --quantization fp8 --batch-size 1 --input-len 1024 --output-len 128 --iters 3
done
