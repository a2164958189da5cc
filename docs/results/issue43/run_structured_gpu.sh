#!/usr/bin/env bash
# Issue 43 on the device: structured outputs' cost in a decode step. Llama-3.1-8B's shapes with dummy
# FP8 weights and a 128k-class vocabulary — DeepSeek-V3's tokenizer (129,280 ids: the shared data
# has no Llama-3 tokenizer.json), carried xz-compressed as .so/tokenizer.json.xz — through
# bench throughput (128 in / 128 out, greedy) at batch 1, 64 and 256: unconstrained, then every
# request under a JSON schema — an array of strings (outputs that run the whole 128 tokens, so
# the batch stays full: the per-step cost) and an order record (a realistic schema; requests end
# with their JSON). Also the masked sampling kernel's GPU test. Needs gpu-structured.tar.xz
# (scripts/pack_gpu_binaries.sh ... --only build/tests/test_cuda_sampling), carried.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/g /tmp/m8b; tar xJf gpu-structured.tar.xz -C /tmp/g
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/g:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
timeout 120 /tmp/g/test_cuda_sampling > $R/tests_sampling.log 2>&1
echo "test_cuda_sampling exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' $R/tests_sampling.log | tr '\n' ' ')" | tee $R/tests.txt
xz -dc .so/tokenizer.json.xz > /tmp/m8b/tokenizer.json
python3 - <<'PY'
import json
c = json.load(open("bench/configs/llama-3.1-8b/config.json"))
c["vocab_size"] = 129280
c["eos_token_id"] = 1
json.dump(c, open("/tmp/m8b/config.json", "w"))
PY
echo '{"type": "array", "items": {"type": "string"}}' > /tmp/strings.json
python3 -c "import json; print(json.dumps({'type': 'object', 'properties': {'id': {'type': 'string', 'pattern': '^ORD-[0-9]{6}$'}, 'items': {'type': 'array', 'minItems': 1, 'maxItems': 4, 'items': {'type': 'object', 'properties': {'sku': {'type': 'string', 'maxLength': 12}, 'qty': {'type': 'integer', 'minimum': 1, 'maximum': 99}, 'price': {'type': 'number', 'minimum': 0, 'maximum': 10000}}, 'required': ['sku', 'qty', 'price']}}, 'status': {'enum': ['pending', 'shipped', 'delivered', 'cancelled']}}, 'required': ['id', 'items', 'status']}))" > /tmp/order.json
for b in 1 64 256; do
  for c in none strings order; do
    s=(); [[ $c != none ]] && s=(--json-schema /tmp/$c.json --disable-any-whitespace)
    timeout 150 /tmp/g/fp8lm bench throughput /tmp/m8b --device cuda --load-format dummy --quantization fp8 \
      --num-prompts $b --max-num-seqs $b --input-len 128 --output-len 128 "${s[@]}" \
      --json $R/tp_${c}_b$b.json > $R/tp_${c}_b$b.log 2>&1
    echo "$c b$b exit $?: $(grep -E 'output tok/s|ms / step|forward steps|grammar compile ms|device idle' $R/tp_${c}_b$b.log | tr -s ' ' | tr '\n' ' ')"
  done
done | tee $R/throughput.txt
(cd $R && tar czf runs.tgz tp_* tests_* && rm -f tp_* tests_*)
