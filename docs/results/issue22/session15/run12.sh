# The fix: SiLU·mul-while-staging compiled into the grouped GEMV only (fp8lm) against HEAD before
# it (fp8lm_head); GEMV / MoE / model tests on the fix.
source .gpu-bin/common.sh
TT=240 gtest test_cuda_gemv
TT=120 gtest test_cuda_moe_grouped
TT=120 gtest test_cuda_moe
TT=200 gtest test_cuda_model
B() {  # name binary model args...
  local name=$1 bin=$2; shift 2
  local t=$SECONDS
  timeout 200 /tmp/b/$bin bench latency "$@" --device cuda --load-format dummy --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc $? $((SECONDS-t))s @$SECONDS: $(grep -E 'TTFT ms|TPOT median ms|decode weight GB' $R/$name.txt | tr -s ' ' | tr '\n' '|')"
}
c8=bench/configs/llama-3.1-8b c70=bench/configs/llama-3.1-70b
for rep in 1 2; do for bin in fp8lm fp8lm_head; do
  B 8b_fp8_b1_${bin}_r$rep $bin $c8 --quantization fp8 --batch-size 1 --input-len 1024 --output-len 256 --iters 3
done; done
for bin in fp8lm fp8lm_head; do
  B 8b_fp8block_b1_$bin $bin $c8 --quantization fp8:block --batch-size 1 --input-len 1024 --output-len 256 --iters 3
  B 8b_fp8_b8_$bin $bin $c8 --quantization fp8 --batch-size 8 --input-len 1024 --output-len 256 --iters 3
done
B 8b_fp8_b1_profile_fp8lm fp8lm $c8 --quantization fp8 --batch-size 1 --input-len 1024 --output-len 128 --iters 1 --profile
sed -n '/op profile, decode/,/^$/p' $R/8b_fp8_b1_profile_fp8lm.txt | head -14
for bin in fp8lm fp8lm_head; do
  ((SECONDS < 470)) || { echo "70b $bin skipped at ${SECONDS}s"; continue; }
  B 70b_fp8_b1_$bin $bin $c70 --quantization fp8 --batch-size 1 --input-len 1024 --output-len 128 --iters 3
done
rm -f $R/8b_fp8_b1_*_r2.*
