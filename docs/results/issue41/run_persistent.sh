# Issue 41, the persistent kernel's device runs from the second on: its GPU tests, the copy
# bandwidth, bench latency (Llama-3.1-8B dummy, 1,024 in / 128 out) layered against persistent —
# FP8 and BF16, batch 1 and 8 — with a previous persistent build where the archive holds one
# (fp8lm_v2) at batch 1, then the kernel's own timers (--profile, 32 out) at batch 1; with VERIFY=1
# also issue 42's verify steps (--verify-tokens V: V tokens a sequence a step) on the layered path.
# TESTS=0 skips the tests; EXTRA="fp8lm_x …" times and profiles more builds of the archive at FP8
# batch 1. The archive gpu-persistent.tar.xz is git-ignored here: the device call must carry it.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/f; tar xJf gpu-persistent.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
for d in /work/main; do [[ -e $d ]] || { mkdir -p /work && ln -s "$PWD" $d; }; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
hung=0  # a persistent kernel that hangs in its tests is not timed (each run would spend its timeout)
# The wide-MLP test first and alone (rows of several pages a warp, as 8B's: where v5 hung), so a hang
# costs 60 s, not the whole suite's 180.
[[ ${TESTS:-1} == 0 ]] || for t in test_cuda_persistent_schedule "test_cuda_persistent --gtest_filter=CudaPersistentWide.*" \
         "test_cuda_persistent --gtest_filter=-CudaPersistentWide.*"; do
  log=$R/tests_$(echo "$t" | tr -c 'A-Za-z0-9_\n' '_').log
  limit=180; [[ $t == *Wide.\* ]] && limit=60
  timeout $limit /tmp/f/$t > $log 2>&1
  rc=$?; [[ $rc == 124 ]] && hung=1
  echo "$t exit $rc: $(grep -E '^\[  (PASSED|FAILED)  \]|persistent vs|greedy|batched' $log | tr '\n' ' ')" | tee -a $R/tests.txt
done
python3 docs/results/issue41/copy_bandwidth.py | tee $R/copy.txt
bw=$(awk '{print $2"T"}' $R/copy.txt)
lat() {  # lat BIN KERNEL QUANT BATCH NAME [extra]
  [[ $hung == 1 && $2 == persistent && $1 == fp8lm ]] && { echo "$5 skipped: the tests hung"; return; }
  local q=(); [[ $3 == fp8 ]] && q=(--quantization fp8)
  timeout 150 /tmp/f/$1 bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${q[@]}" \
    --decode-kernel $2 --batch-size $4 --input-len 1024 --output-len ${OUTLEN:-128} --iters 3 --roofline-bandwidth $bw \
    --json $R/$5.json "${@:6}" > $R/$5.log 2>&1
  echo "$5 exit $?: $(grep -E 'TPOT median|decode weight GB/s' $R/$5.log | tr -s ' ' | tr '\n' ' ')"
}
{
# QUICK=1 (little device time left): batch 1 only, and the short verify sweep; QUANTS="fp8": FP8
# only; SKIP_LAT=1 skips the layered / persistent comparison, PROFILE_QUANTS="" the profile.
for q in ${QUANTS:-fp8 bf16}; do for b in 1 8; do
  [[ ${QUICK:-0} == 1 && $b == 8 ]] && continue
  [[ ${SKIP_LAT:-0} == 1 ]] && continue
  lat fp8lm layered $q $b lat_layered_${q}_b$b; lat fp8lm persistent $q $b lat_persistent_${q}_b$b
done; done
if [[ -x /tmp/f/fp8lm_v2 ]]; then
  for q in ${QUANTS:-fp8 bf16}; do lat fp8lm_v2 persistent $q 1 lat_persistent_v2_${q}_b1; done
fi
# EXTRA="fp8lm_x …": more builds of the archive, each at FP8 batch 1 and in the profile.
for x in ${EXTRA:-}; do lat $x persistent fp8 1 lat_persistent_${x}_fp8_b1; done
} | tee $R/latency.txt
profile() {  # profile BIN QUANT NAME: the kernel's own timers at batch 1, 32 out
  OUTLEN=32 lat $1 persistent $2 1 $3 --profile > /dev/null
  echo "== $1 $2 b1 persistent profile"; sed -n '/op profile, decode/,/profiled iteration/p' $R/$3.log
}
{
for q in ${PROFILE_QUANTS-fp8}; do profile fp8lm $q prof_persistent_${q}_b1; done
for x in ${EXTRA:-}; do profile $x fp8 prof_persistent_${x}_fp8_b1; done
} | tee $R/profile.txt
if [[ ${VERIFY:-0} == 1 ]]; then
  timeout 240 /tmp/f/test_cuda_model --gtest_filter='CudaModelGraphs.*' > $R/tests_verify_graphs.log 2>&1
  echo "verify graphs test exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]|graphs,' $R/tests_verify_graphs.log | tr '\n' ' ')" | tee -a $R/tests.txt
  {
  sweep="fp8:1:1 fp8:1:2 fp8:1:3 fp8:1:5 fp8:1:8 bf16:1:1 bf16:1:5 fp8:8:1 fp8:8:5 fp8:32:1 fp8:32:3"
  [[ ${QUICK:-0} == 1 ]] && sweep="fp8:1:1 fp8:1:5"
  for qbv in $sweep; do
    IFS=: read -r q b v <<< "$qbv"
    OUTLEN=64 lat fp8lm layered $q $b verify_${q}_b${b}_v$v --verify-tokens $v
  done
  OUTLEN=64 lat fp8lm layered fp8 1 verify_fp8_b1_v5_eager --verify-tokens 5 --no-cuda-graphs
  } | tee $R/verify.txt
fi
# A device call brings back a few files: the summaries, and every run's log and JSON in one archive.
(cd $R && shopt -s nullglob && f=(verify_* lat_* prof_* tests_*) && tar czf runs.tgz "${f[@]}" && rm -f "${f[@]}")
