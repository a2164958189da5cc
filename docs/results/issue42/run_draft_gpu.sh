#!/usr/bin/env bash
# Issue 42 on the device: trains the shipped model's draft model (tools/train_draft_model.py:
# torch and transformers, from .eagle3/draft_tokens.pt (two of every three 64 Ki-token pieces of what tools/train_eagle3_head.py
# --write-tokens made from the training books: a device call carries at most 64 MiB)), then its mean accepted length on held-out text
# (WikiText-2 test sentences, greedy, k = 2, 4, 6; n-gram beside it) and end-to-end output tok/s
# with and without it (bench throughput, 64 in / 128 out, batch 1, 8, 64) with the fp8lm of
# gpu-persistent.tar.xz (scripts/pack_gpu_binaries.sh).
#   TRAIN_S=seconds of training (default 180), TOKENS=training tokens (default 8,000,000)
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/g; tar xJf gpu-persistent.tar.xz -C /tmp/g
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/g:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device_draft.txt
DRAFT=$R/fp8lm-gutenberg-draft-3m
PYTHONUNBUFFERED=1 timeout $(( ${TRAIN_S:-180} + 90 )) python3 tools/train_draft_model.py --device cuda \
  --tokens-file .eagle3/draft_tokens.pt --tokens ${TOKENS:-8000000} --max-seconds ${TRAIN_S:-180} \
  --out $DRAFT 2>&1 | grep -v -i warn > $R/train_draft.log
tail -3 $R/train_draft.log
[[ -f $DRAFT/model.safetensors ]] || { echo "no draft model was written"; exit 1; }
timeout 240 python3 tools/speculative_acceptance.py --bin /tmp/g/fp8lm --model models/fp8lm-gutenberg-22m \
  --wikitext .eagle3/wiki.test.raw --prompts 8 --tokens 96 --k 2,4,6 --draft-model $DRAFT --methods draft,ngram \
  --device cuda --json $R/acceptance_draft_gpu.json 2>&1 | tail -6
for b in 1 8 64; do
  for m in none draft; do
    s=(); [[ $m == draft ]] && s=(--speculative-config "{\"model\":\"$DRAFT\",\"num_speculative_tokens\":4}")
    timeout 60 /tmp/g/fp8lm bench throughput models/fp8lm-gutenberg-22m --device cuda --num-prompts $b \
      --max-num-seqs $b --input-len 64 --output-len 128 "${s[@]}" --json $R/throughput_${m}_b$b.json > $R/throughput_${m}_b$b.log 2>&1
    echo "$m b$b exit $?: $(grep -E "output tok/s|mean accepted length" $R/throughput_${m}_b$b.log | tr -s ' ' | tr '\n' ' ')"
  done
done | tee $R/throughput_draft.txt
