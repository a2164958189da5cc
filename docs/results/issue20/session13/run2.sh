set -uo pipefail
source .gpu-bin/common.sh
TT=120 gtest test_cuda_grouped_gemm
grep -E "^\[ (per|tensor|1x128)|Failure" -A2 $R/test_cuda_grouped_gemm.log | head -30
F="/tmp/b/fp8lm bench sweep --device cuda --load-format dummy --warmup 1 --iters 3"
Q=bench/configs/qwen3-30b-a3b; M=bench/configs/mixtral-8x7b
left() { echo $((570 - SECONDS + t0)); }
sweep() { local name=$1; shift; local l=$(left); [ $l -lt 50 ] && { echo "skip $name"; return; }
  timeout $l $F "$@" --out-dir /tmp/$name > $R/$name.txt 2>&1; echo "$name exit $? $((SECONDS-t0))s"; grep -E "^\s+(bf16|fp8)|error" $R/$name.txt | head -12; }
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv /tmp/b/fp8lm bench latency $Q --device cuda --load-format dummy --quantization fp8 --batch-size 1 --input-len 16 --output-len 3 --warmup 0 --iters 1 --max-num-batched-tokens 512 > $R/ncu_fp8_b1.csv 2> $R/ncu_fp8_b1.err; echo "ncu exit $? $((SECONDS-t0))s"; xz -9 $R/ncu_fp8_b1.csv
sweep mixtral_bf16 $M --configs "bf16" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32
sweep mixtral_block $M --configs "fp8:block" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32
sweep mixtral_fp8_256 $M --configs "fp8" --batch-sizes 256 --input-len 128 --output-len 32
sweep qwen3_bf16 $Q --configs "bf16" --batch-sizes 1,8,64,256 --input-len 128 --output-len 32
l=$(left); [ $l -gt 50 ] && { timeout $l /tmp/b/fp8lm bench latency $Q --device cuda --load-format dummy --quantization fp8 --batch-size 16 --input-len 256 --output-len 4 --warmup 1 --iters 2 --profile > $R/profile_fp8_prefill.txt 2>&1; echo "profile exit $? $((SECONDS-t0))s"; }
echo "all done $((SECONDS-t0))s"
