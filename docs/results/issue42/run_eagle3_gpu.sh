#!/usr/bin/env bash
# Issue 42 on the device: trains the shipped model's EAGLE-3 head (tools/train_eagle3_head.py:
# torch alone, from .eagle3/train_tokens.pt, which `--write-tokens` made from the training books),
# then its mean accepted length on held-out text (WikiText-2 test sentences, greedy, k = 2, 4, 6)
# and end-to-end output tok/s with and without it (bench throughput, 64 in / 128 out, batch 1, 8,
# 64) with the fp8lm of gpu-eagle3.tar.xz (scripts/pack_gpu_binaries.sh … --only build/src/fp8lm).
#   TRAIN_S=seconds of training (default 200)
set -u
R=${OUT:-/tmp/out}; mkdir -p $R /tmp/g; tar xJf gpu-eagle3.tar.xz -C /tmp/g
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/g:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
HEAD=$R/fp8lm-gutenberg-22m-eagle3
PYTHONUNBUFFERED=1 timeout $(( ${TRAIN_S:-200} + 90 )) python3 tools/train_eagle3_head.py --device cuda \
  --tokens-file .eagle3/train_tokens.pt --tokens 6000000 --seq-len 512 --batch 8 --max-seconds ${TRAIN_S:-200} \
  --out $HEAD 2>&1 | grep -v -i warn > $R/train.log
tail -3 $R/train.log
[[ -f $HEAD/model.safetensors ]] || { echo "no head was written"; exit 1; }
timeout 200 python3 tools/speculative_acceptance.py --bin /tmp/g/fp8lm --model models/fp8lm-gutenberg-22m \
  --wikitext .eagle3/wiki.test.raw --prompts 8 --tokens 96 --k 2,4,6 --eagle3 $HEAD --methods eagle3 \
  --device cuda --json $R/acceptance_gpu.json 2>&1 | tail -3
for b in 1 8 64; do
  for m in none eagle3; do
    s=(); [[ $m == eagle3 ]] && s=(--speculative-config "{\"method\":\"eagle3\",\"model\":\"$HEAD\",\"num_speculative_tokens\":4}")
    timeout 60 /tmp/g/fp8lm bench throughput models/fp8lm-gutenberg-22m --device cuda --num-prompts $b \
      --max-num-seqs $b --input-len 64 --output-len 128 "${s[@]}" --json $R/throughput_${m}_b$b.json > $R/throughput_${m}_b$b.log 2>&1
    echo "$m b$b exit $?: $(grep -E "output tok/s|mean accepted length" $R/throughput_${m}_b$b.log | tr -s ' ' | tr '\n' ' ')"
  done
done | tee $R/throughput.txt
