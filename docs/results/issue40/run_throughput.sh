# Issue 40's device run, third call (same warm machine): bench throughput 128/128, FP8 + FP8 KV,
# before and after alternated, three runs each.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/a:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
for r in 1 2 3; do
  for v in before after; do
    [[ $v == before ]] && B=/tmp/keep/before/fp8lm || B=/tmp/a/fp8lm
    $B bench throughput bench/configs/llama-3.1-8b --device cuda --load-format dummy \
      --quantization fp8 --kv-cache-dtype fp8 --num-prompts 4096 --input-len 128 --output-len 128 \
      --max-num-seqs 1024 --max-num-batched-tokens 16384 --json $R/thr_${v}_r$r.json > $R/thr_${v}_r$r.log 2>&1
    echo "thr_${v}_r$r exit $?: $(grep -iE 'output tok/s|tok/s' $R/thr_${v}_r$r.log | tail -1)"
  done
done | tee $R/throughput.txt
(cd $R && tar czf throughput_runs.tgz thr_*.json thr_*.log && rm -f thr_*.json thr_*.log)
