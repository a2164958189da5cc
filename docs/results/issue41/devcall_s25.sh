# Session 25's one device call: issue 41's v9 (v8 + attention merged by shuffles, weights once)
# and v8 timed (run_v7.sh: v9's wide test, layered, v9, v8 and the no-prefetch build v8np, v9's
# profile, the rest of v9's tests; then v8's wide test and BF16 layered), issue 43's step cost (run_step_cost.sh,
# --worker), then v9 under Nsight Compute (run_ncu.sh, LAYERED=0). Carry gpu-persistent.tar.xz
# (fp8lm = v9, fp8lm_v8, fp8lm_v8np, test_cuda_persistent = v9's, test_cuda_persistent_v8) and .so.
# Everything comes back as $OUT/all.tar.xz.
set -u
T=${T:-570}  # the seconds this call may take in all (the device call's limit, less the archive)
t0=$SECONDS; left() { local s=$(( $1 - (SECONDS - t0) )); echo $(( s > 5 ? s : 5 )); }  # seconds until $1 into the call
EXTRA="fp8lm_v8 fp8lm_v8np" timeout $(( T * 330 / 570 )) bash docs/results/issue41/run_v7.sh 2>&1 | tail -30
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}") timeout 60 /tmp/f/test_cuda_persistent_v8 --gtest_filter='CudaPersistentWide.*' > $OUT/t_v8.log 2>&1; echo "v8 tests exit $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/t_v8.log | tr '\n' ' ')"
bw=$(awk '{print $2"T"}' $OUT/copy.txt 2>/dev/null)
LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}") timeout 60 /tmp/f/fp8lm bench latency bench/configs/llama-3.1-8b --device cuda \
  --load-format dummy --decode-kernel layered --batch-size 1 --input-len 1024 --output-len 128 --iters 3 \
  ${bw:+--roofline-bandwidth $bw} --json $OUT/lat_layered_bf16.json > $OUT/lat_layered_bf16.log 2>&1
echo "bf16 layered exit $?: $(grep -E 'TPOT median' $OUT/lat_layered_bf16.log | tr -s ' ')"
mkdir -p $OUT/s; cp gpu-persistent.tar.xz gpu-structured.tar.xz
OUT=$OUT/s timeout $(left $(( T * 380 / 570 ))) bash docs/results/issue43/run_step_cost.sh 2>&1 | tail -14
[[ $(left $T) -gt 100 ]] && { mkdir -p $OUT/n; OUT=$OUT/n LAYERED=0 timeout $(left $T) bash docs/results/issue41/run_ncu.sh 2>&1 | tail -4; }
cd $OUT && tar cJf /tmp/all.tar.xz . && find . -mindepth 1 -delete && mv /tmp/all.tar.xz all.tar.xz
