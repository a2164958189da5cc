# Session 25's second device call: v10 (v9 + gemv inlined at one call site, each tile counted done
# by the warp that wrote it, no L2 prefetch) against the layered path (FP8 and BF16) and v9 (main at session 25), with
# v10's tests (those on the tests' fixture models: the shipped model's weights were not carried)
# and its profile. Carry gpu-persistent.tar.xz (fp8lm = v10, fp8lm_v9 = main's build before the patch, test_cuda_persistent = v10's).
set -u
R=$OUT; mkdir -p /tmp/f; tar xJf gpu-persistent.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader > $R/device.txt
timeout 90 /tmp/f/test_cuda_persistent --gtest_filter='CudaPersistentWide.*:Architectures/*' > $R/t.log 2>&1
echo "tests exit $?: $(grep -E '^\[  (PASSED|FAILED)' $R/t.log | tr '\n' ' ')" | tee $R/tests.txt
python3 docs/results/issue41/copy_bandwidth.py > $R/copy.txt; bw=$(awk '{print $2"T"}' $R/copy.txt); cat $R/copy.txt
lat() { timeout 100 /tmp/f/$1 bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy $2 --batch-size 1 --input-len 1024 --output-len ${OL:-128} --iters 3 --roofline-bandwidth $bw --json $R/$3.json "${@:4}" > $R/$3.log 2>&1; echo "$3 exit $?: $(grep -E 'TPOT median' $R/$3.log | tr -s ' ')"; }
lat fp8lm "--quantization fp8 --decode-kernel layered" lat_layered
lat fp8lm "--decode-kernel layered" lat_layered_bf16
grep -q "exit 0" $R/tests.txt && lat fp8lm "--quantization fp8 --decode-kernel persistent" lat_v10
lat fp8lm_v9 "--quantization fp8 --decode-kernel persistent" lat_v9
grep -q "exit 0" $R/tests.txt && { OL=32 lat fp8lm "--quantization fp8 --decode-kernel persistent" prof_v10 --profile; sed -n '/op profile, decode/,/profiled iteration/p' $R/prof_v10.log; }
cd $R && tar cJf /tmp/all.tar.xz . && find . -mindepth 1 -delete && mv /tmp/all.tar.xz all.tar.xz
