# Issue 41's baseline on the card the call lands on: the copy bandwidth (PyTorch, a 4 GiB
# device-to-device copy, bytes read + written, median of 20), then the layered decode at batch 1,
# FP8 and BF16, with bench latency --profile and the roofline that counts what a step reads
# (commit 4b80414, fp8lm alone in gpu-final.tar.xz).
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/f; tar xJf gpu-final.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "$lt"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
python3 docs/results/issue41/copy_bandwidth.py | tee $R/copy.txt
for q in fp8 bf16; do
  f=(); [[ $q == fp8 ]] && f=(--quantization fp8)
  /tmp/f/fp8lm bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${f[@]}" --batch-size 1 \
    --input-len 1024 --output-len 128 --iters 3 --profile --json $R/lat_${q}_b1.json > $R/lat_${q}_b1.log 2>&1
  echo "$q b1 exit $?: $(grep -E 'TPOT median|decode weight GB/s' $R/lat_${q}_b1.log | tr -s ' ' | tr '\n' ' ')"
done
