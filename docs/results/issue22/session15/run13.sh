# MoE decode with the fix (fp8lm: the grouped GEMV's SiLU·mul staging in its own instances) against
# 0d950b5 (fp8lm_head), alternated: Qwen3-30B-A3B and Mixtral-8x7B dummy weights, 128 in / 32 out.
source .gpu-bin/common.sh
t0=$SECONDS
sweep() { local name=$1 bin=$2; shift 2; local left=$((430 - SECONDS + t0)); [ $left -lt 60 ] && { echo "skip $name"; return; }
  timeout $left /tmp/b/$bin bench sweep --device cuda --load-format dummy --warmup 1 --iters 3 "$@" --out-dir $R/$name > $R/$name.txt 2>&1
  echo "$name exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)|error" $R/$name.txt | head -12; }
Q=bench/configs/qwen3-30b-a3b M=bench/configs/mixtral-8x7b
sweep qwen3_fixed fp8lm $Q --configs "fp8 fp8:block" --batch-sizes 1,8,64 --input-len 128 --output-len 32
sweep qwen3_head fp8lm_head $Q --configs "fp8 fp8:block" --batch-sizes 1,8,64 --input-len 128 --output-len 32
sweep mixtral_fixed fp8lm $M --configs "fp8" --batch-sizes 1,8 --input-len 128 --output-len 32
sweep mixtral_head fp8lm_head $M --configs "fp8" --batch-sizes 1,8 --input-len 128 --output-len 32
rm -rf $R/*/report.html
