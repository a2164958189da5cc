# The persistent decode kernel's own timers (bench latency --profile --decode-kernel persistent)
# on Llama-3.1-8B (dummy weights), FP8 and BF16 at batch 1, beside the layered path's op profile.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/f; tar xJf gpu-persistent.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/device.txt
for q in fp8 bf16; do for k in ${KERNELS:-persistent layered}; do
  f=(); [[ $q == fp8 ]] && f=(--quantization fp8)
  n=prof_${k}_${q}_b${B:-1}
  timeout 200 /tmp/f/fp8lm bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${f[@]}" \
    --decode-kernel $k --batch-size ${B:-1} --input-len 1024 --output-len 32 --iters 2 --profile --roofline-bandwidth 3.02T \
    > $R/$n.log 2>&1
  echo "$n exit $?: $(grep -E 'TPOT median' $R/$n.log | tr -s ' ' | tr '\n' ' ')"
  sed -n '/op profile, decode/,/of the roofline/p' $R/$n.log | grep -E "persistent|step|TPOT" 
done; done
