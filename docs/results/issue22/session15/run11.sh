# Where did batch-1 FP8 decode lose 7 % between issue 18's binary (64e343a) and 03ca8d0? Bisect
# binaries (each commit's fp8lm) on Llama-3.1-8B FP8 batch 1, then op profiles of the two ends.
source .gpu-bin/common.sh
B() {  # name binary args...
  local name=$1 bin=$2; shift 2
  local t=$SECONDS
  timeout 120 /tmp/b/$bin bench latency bench/configs/llama-3.1-8b "$@" --device cuda --load-format dummy > $R/$name.txt 2>&1
  echo "$name rc $? $((SECONDS-t))s @$SECONDS: $(grep -E 'TTFT ms|TPOT median ms|decode weight GB' $R/$name.txt | tr -s ' ' | tr '\n' '|')"
}
bins="fp8lm_64e343a fp8lm_8bcc5b1 fp8lm_8b477f4 fp8lm_35b6940 fp8lm_d7a8a28 fp8lm_c0d82a6 fp8lm_8a5603b fp8lm_7dafbc2 fp8lm"
for rep in 1 2; do
  for bin in $bins; do
    B b1_${bin}_r$rep $bin --quantization fp8 --batch-size 1 --input-len 1024 --output-len 256 --iters 3
  done
done
B bf16_b1_fp8lm_64e343a fp8lm_64e343a --batch-size 1 --input-len 1024 --output-len 256 --iters 3
for bin in fp8lm_64e343a fp8lm; do
  B profile_b1_$bin $bin --quantization fp8 --batch-size 1 --input-len 1024 --output-len 128 --iters 1 --profile
done
for bin in fp8lm_64e343a fp8lm; do echo "== $bin"; sed -n '/op profile, decode/,/^$/p' $R/profile_b1_$bin.txt | head -30; done
rm -f $R/b1_* $R/bf16_*
