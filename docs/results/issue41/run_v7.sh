# Issue 41, session 24: the persistent kernel's decoupled tiles (v7: the tile's last warp reduces,
# no CTA barrier a tile) and odd-step pages taken in turn (v8), at Llama-3.1-8B dummy FP8 batch 1,
# 1,024 in / 128 out, against the layered path in the same call. fp8lm is the newest build; the
# archive's other builds (EXTRA="fp8lm_v7 …") are timed after it. Carry gpu-persistent.tar.xz.
R=$OUT; mkdir -p /tmp/f; tar xJf gpu-persistent.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader > $R/device.txt
timeout 60 /tmp/f/test_cuda_persistent --gtest_filter='CudaPersistentWide.*' > $R/t_wide.log 2>&1; echo "wide exit $?" | tee $R/tests.txt
python3 docs/results/issue41/copy_bandwidth.py > $R/copy.txt; bw=$(awk '{print $2"T"}' $R/copy.txt); cat $R/copy.txt
lat() { timeout 100 /tmp/f/$1 bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy --quantization fp8 --decode-kernel $2 --batch-size 1 --input-len 1024 --output-len ${OL:-128} --iters 3 --roofline-bandwidth $bw --json $R/$3.json "${@:4}" > $R/$3.log 2>&1; echo "$3 exit $?: $(grep -E 'TPOT median' $R/$3.log | tr -s ' ')"; }
lat fp8lm layered lat_layered
grep -q "exit 0" $R/tests.txt && lat fp8lm persistent lat_new
for x in ${EXTRA:-}; do lat $x persistent lat_$x; done
grep -q "exit 0" $R/tests.txt && { OL=32 lat fp8lm persistent prof_new --profile; sed -n '/op profile, decode/,/profiled iteration/p' $R/prof_new.log; }
timeout 100 /tmp/f/test_cuda_persistent --gtest_filter='-CudaPersistentWide.*' > $R/t_rest.log 2>&1; echo "rest exit $?: $(grep -E '^\[  (PASSED|FAILED)' $R/t_rest.log | tr '\n' ' ')" | tee -a $R/tests.txt
cd $R && tar czf runs.tgz *.log *.json && rm -f *.log *.json
