# Load time: fused weights uploaded part by part and BF16 uploaded as it is (fp8lm) against the
# host-side concatenation and copies before (fp8lm_old = bb3df93); the GPU model tests first.
source .gpu-bin/common.sh
TT=100 gtest test_cuda_linear_plan
TT=100 gtest test_cuda_moe
TT=150 gtest test_cuda_model
L() {  # name binary model args...: bench latency's load_s, one short iteration
  local name=$1 bin=$2; shift 2
  local t=$SECONDS
  timeout 150 /tmp/b/$bin bench latency "$@" --device cuda --load-format dummy --batch-size 1 --input-len 16 \
    --output-len 4 --warmup 0 --iters 1 --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc $? $((SECONDS-t))s @$SECONDS: load_s $(python3 -c "import json;print(round(json.load(open('$R/$name.json'))['results']['load_s'],2))" 2>/dev/null) $(grep -E 'RSS peak' $R/$name.txt | tr -s ' ')"
}
c8=bench/configs/llama-3.1-8b c70=bench/configs/llama-3.1-70b
for bin in fp8lm fp8lm_old; do L load_8b_bf16_$bin $bin $c8; done
for bin in fp8lm fp8lm_old; do L load_8b_fp8_$bin $bin $c8 --quantization fp8; done
for bin in fp8lm fp8lm_old; do
  ((SECONDS < 190)) || { echo "70b $bin skipped at ${SECONDS}s"; continue; }
  L load_70b_fp8_$bin $bin $c70 --quantization fp8
done
