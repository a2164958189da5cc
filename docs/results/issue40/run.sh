# Issue 40's device run, second call: on one machine, the GPU test programs of the new layout
# (gpu-after.tar.xz), then bench latency (FP8 / BF16, batch 1 / 8)
# with fp8lm before (a3baf26, /tmp/keep/before from stage.sh) and after, alternated; throughput in
# run_throughput.sh.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/a
tar xJf gpu-after.tar.xz -C /tmp/a
[[ -f models/fp8lm-gutenberg-22m/config.json ]] || { rm -rf models; cp -r /tmp/keep/models models; }
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
[[ -n $lt ]] || lt=$(find / -name 'libcublasLt.so*' -not -path '*/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/tmp/a:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
# The tests read their fixtures from the source directory they were built in (/work/after).
for d in /work/main /work/after; do [[ -e $d ]] || { mkdir -p /work && ln -s "$PWD" $d; }; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
# All GPU test programs of the new layout.
for t in /tmp/a/test_cuda_*; do
  n=$(basename $t)
  timeout 300 $t > $R/tests_$n.log 2>&1
  echo "$n exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' $R/tests_$n.log | tr '\n' ' ')" | tee -a $R/tests.txt
done
grep -h -E '^\[  FAILED' $R/tests_*.log | head -20
# bench latency, before and after alternated (before first, then after first): each run the
# median of three timed iterations.
lat() {  # lat BIN NAME QUANT BATCH
  local q=(); [[ $3 == fp8 ]] && q=(--quantization fp8)
  $1 bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${q[@]}" \
    --batch-size $4 --input-len 1024 --output-len 128 --iters 3 --json $R/$2.json > $R/$2.log 2>&1
  echo "$2 exit $?: $(grep -iE 'tok/s|TPOT' $R/$2.log | tail -2 | tr '\n' ' ')"
}
for r in 1 2; do
  order="before after"; [[ $r == 2 ]] && order="after before"
  for v in $order; do
    [[ $v == before ]] && B=/tmp/keep/before/fp8lm || B=/tmp/a/fp8lm
    for q in fp8 bf16; do for b in 1 8; do lat $B lat_${v}_${q}_b${b}_r$r $q $b; done; done
  done
done | tee $R/latency.txt
# Eight files at most come back: the JSON and logs in one archive.
(cd $R && tar czf latency_runs.tgz lat_*.json lat_*.log tests_*.log && rm -f lat_*.json lat_*.log tests_*.log)
