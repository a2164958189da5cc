#!/usr/bin/env bash
# Issue 43 on the device, the table of docs/benchmarks.md "Structured outputs": Llama-3.1-8B's shapes,
# dummy FP8 weights, DeepSeek-V3's 129k vocabulary (.so/tokenizer.json.xz, carried), bench throughput
# 128 in / 128 out at batch 1, 64, 256, unconstrained against every request under the regex
# [a-z ]* (the batch stays full), two runs each; then bench structured --worker (the schema corpus' compile
# times, in this process and the server's way through a worker process, and a step's mask on this host's CPU). Carry gpu-structured.tar.xz (scripts/pack_gpu_binaries.sh
# gpu-structured.tar.xz --only) and .so.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R/r /tmp/g /tmp/m8b; tar xJf gpu-structured.tar.xz -C /tmp/g
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/g:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
xz -dc .so/tokenizer.json.xz > /tmp/m8b/tokenizer.json
python3 -c "
import json; c = json.load(open('bench/configs/llama-3.1-8b/config.json')); c['vocab_size'] = 129280; c['eos_token_id'] = 1
json.dump(c, open('/tmp/m8b/config.json', 'w'))"
/tmp/g/fp8lm bench structured /tmp/m8b --schemas bench/structured_schemas.json --worker --json $R/r/bench_structured.json \
  > $R/bench_structured.txt 2>&1
tail -n 1 $R/bench_structured.txt
for b in 1 64 256; do
  for c in none regex none2 regex2; do
    s=(); [[ $c == regex* ]] && s=(--regex '[a-z ]*')
    timeout 150 /tmp/g/fp8lm bench throughput /tmp/m8b --device cuda --load-format dummy --quantization fp8 \
      --num-prompts $b --max-num-seqs $b --input-len 128 --output-len 128 "${s[@]}" --json $R/r/tp_${c}_b$b.json \
      > $R/r/tp_${c}_b$b.log 2>&1
    echo "$c b$b exit $?: $(grep -E 'output tok/s|ms / step|grammar compile ms|device idle' $R/r/tp_${c}_b$b.log | tr -s ' ' | tr '\n' ' ')"
  done
done | tee $R/throughput.txt
(cd $R && tar czf runs.tgz r && rm -rf r)
