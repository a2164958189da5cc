# Issue 41's first device run of the persistent decode kernel, on the card the call lands on:
# its GPU tests (the schedule; logits, greedy tokens and batched == alone against the layered
# path on the shipped model), the copy bandwidth, then bench latency of Llama-3.1-8B (dummy
# weights, 1,024 in / 128 out, 3 timed iterations) with --decode-kernel layered and persistent,
# alternated, FP8 and BF16, batch 1 and 8. Binaries: gpu-persistent.tar.xz (fp8lm and the two
# test programs, scripts/pack_gpu_binaries.sh).
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/f; tar xJf gpu-persistent.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
[[ -n $lt ]] || lt=$(find / -name 'libcublasLt.so*' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
for d in /work/main; do [[ -e $d ]] || { mkdir -p /work && ln -s "$PWD" $d; }; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
for t in test_cuda_persistent_schedule test_cuda_persistent; do
  timeout 240 /tmp/f/$t > $R/tests_$t.log 2>&1
  echo "$t exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]|persistent vs|greedy|batched' $R/tests_$t.log | tr '\n' ' ')" | tee -a $R/tests.txt
done
python3 - <<'PY' | tee $R/copy.txt
import torch, statistics
n = 4 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
ts = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
print(f"copy {2 * n / statistics.median(ts) / 1e12:.3f} TB/s (read + write, median of 20)")
PY
bw=$(awk '{print $2"T"}' $R/copy.txt)
lat() {  # lat KERNEL QUANT BATCH
  local q=(); [[ $2 == fp8 ]] && q=(--quantization fp8)
  local n=lat_$1_$2_b$3
  timeout 300 /tmp/f/fp8lm bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${q[@]}" \
    --decode-kernel $1 --batch-size $3 --input-len 1024 --output-len 128 --iters 3 --roofline-bandwidth $bw \
    --json $R/$n.json > $R/$n.log 2>&1
  echo "$n exit $?: $(grep -E 'TPOT median|decode weight GB/s|of the roofline' $R/$n.log | tr -s ' ' | tr '\n' ' ')"
}
for q in fp8 bf16; do for b in 1 8; do
  lat layered $q $b; lat persistent $q $b
done; done | tee $R/latency.txt
(cd $R && tar czf runs.tgz lat_*.json lat_*.log tests_*.log && rm -f lat_*.json lat_*.log tests_*.log)
