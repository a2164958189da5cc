# Issue 45 on the device in one call (~260 s; pack_mla.sh builds it): the MLA and routing tests
# (CUDA against the CPU on the DeepSeek fixtures), then Moonlight-16B-A3B's architecture with
# dummy weights (bench/configs/moonlight-16b-a3b): decode latency at batch 1 and 8, 1,024 in /
# 128 out, BF16, FP8 blocks, FP8 blocks with an FP8 latent cache, and bench throughput at 64 and
# 256 (128 in / 128 out); v1 (no context split) beside v2 at batch 1. Carry gpu-mla.tar.xz;
# everything comes back as $OUT/all.tar.xz.
set -u
R=$OUT; mkdir -p /tmp/m; tar xJf gpu-mla.tar.xz -C /tmp/m
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/m:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
timeout 120 /tmp/m/test_cuda_mla > $R/t_mla.log 2>&1; echo "test_cuda_mla exit $?: $(grep -E '^\[  (PASSED|FAILED)' $R/t_mla.log | tr '\n' ' ')" | tee $R/tests.txt
timeout 120 /tmp/m/test_cuda_moe --gtest_filter='CudaMoeRoute.*:Schemes/CudaMoeModel.*' > $R/t_moe.log 2>&1
echo "test_cuda_moe exit $?: $(grep -E '^\[  (PASSED|FAILED)' $R/t_moe.log | tr '\n' ' ')" | tee -a $R/tests.txt
M=bench/configs/moonlight-16b-a3b
lat() {  # NAME BATCH [ARGS]; B = the binary (fp8lm unless set)
  timeout 90 /tmp/m/${B:-fp8lm} bench latency $M --device cuda --load-format dummy --batch-size $2 --input-len 1024 \
    --output-len 128 --iters 3 --json $R/$1.json "${@:3}" > $R/$1.log 2>&1
  echo "$1 exit $?: $(grep -E 'TPOT median|decode tok/s' $R/$1.log | tr -s ' ' | tr '\n' ' ')"; }
tp() {  # NAME BATCH [ARGS]
  timeout 120 /tmp/m/fp8lm bench throughput $M --device cuda --load-format dummy --num-prompts $2 --max-num-seqs $2 \
    --input-len 128 --output-len 128 --json $R/$1.json "${@:3}" > $R/$1.log 2>&1
  echo "$1 exit $?: $(grep -E 'output tok/s|ms / step' $R/$1.log | tr -s ' ' | tr '\n' ' ')"; }
if grep -q "test_cuda_mla exit 0" $R/tests.txt; then
  (
  B=fp8lm_v1 lat lat_v1_bf16_b1 1
  for b in 1 8; do
    lat lat_bf16_b$b $b
    lat lat_fp8block_b$b $b --quantization fp8:block
    lat lat_fp8block_kvfp8_b$b $b --quantization fp8:block --kv-cache-dtype fp8
  done
  for b in 64 256; do
    tp tp_bf16_b$b $b
    tp tp_fp8block_b$b $b --quantization fp8:block
  done
  ) | tee $R/bench.txt
fi
cd $R && tar cJf /tmp/all.tar.xz . && find . -mindepth 1 -delete && mv /tmp/all.tar.xz all.tar.xz
