# Issue 40's fourth call: FP8 bench latency at batch 8 and 1, fp8lm before (a3baf26) against the
# build with fp8_gemv's Params 64-byte aligned again (gpu-v3.tar.xz), alternated twice. Needs no
# model files (--load-format dummy): the call carries both binaries, fp8lm alone each.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/b /tmp/v3
tar xJf gpu-before.tar.xz -C /tmp/b; tar xJf gpu-v3.tar.xz -C /tmp/v3
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/v3:$(dirname "$lt"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
for r in 1 2; do
  order="before v3"; [[ $r == 2 ]] && order="v3 before"
  for v in $order; do
    [[ $v == before ]] && B=/tmp/b/fp8lm || B=/tmp/v3/fp8lm
    for b in 8 1; do
      $B bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy --quantization fp8 \
        --batch-size $b --input-len 1024 --output-len 128 --iters 3 --json $R/lat_${v}_fp8_b${b}_r$r.json > /tmp/l.log 2>&1
      echo "lat_${v}_fp8_b${b}_r$r exit $?: $(grep 'TPOT median' /tmp/l.log)"
    done
  done
done | tee $R/latency.txt
(cd $R && tar czf runs.tgz lat_*.json && rm -f lat_*.json)
