#!/usr/bin/env bash
# GPU memory under the largest legal configurations (issue 16): `bench throughput`
# on Llama-3.1-8B's architecture (dummy weights, FP8) at 1000 tokens in / 1000 out
# with 512 and with 1024 sequences running at once must complete — the KV cache is
# sized only after the largest step was profiled (engine/runtime.cpp) — and a KV
# cache asked larger than the device holds must end in a named error, not a crash.
# Results under $OUT (default ./gpu-results): memory_<case>.{txt,json}, summary.txt.
#
#   bash scripts/gpu_memory.sh [--quick] [--seqs "512 1024"] [--no-kv-case]
#       --quick: 256 in / 256 out; --seqs: which runs; --no-kv-case: skip the too-large KV cache
#
# Binaries: $FP8LM_BIN (a directory holding fp8lm), else build/src (-DFP8LM_CUDA=ON).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
len=1000 seq_list="512 1024" kv_case=1
while (($#)); do
  case "$1" in
    --quick) len=256 ;;
    --seqs) seq_list=$2; shift ;;
    --no-kv-case) kv_case=0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
bin=${FP8LM_BIN:+$FP8LM_BIN/fp8lm}
bin=${bin:-build/src/fp8lm}
model=bench/configs/llama-3.1-8b
status=0

for seqs in $seq_list; do
  name=memory_fp8_s${seqs}
  timeout "${RUN_TIMEOUT:-420}" "$bin" bench throughput "$model" --device cuda --load-format dummy --quantization fp8 \
    --num-prompts "$seqs" --max-num-seqs "$seqs" --input-len "$len" --output-len "$len" \
    --json "$out/$name.json" > "$out/$name.txt" 2>&1
  rc=$?
  echo "$name ($seqs sequences, $len in / $len out) exit $rc: $(grep -E 'device memory|output tok/s|Error|error' "$out/$name.txt" | head -3 | tr '\n' ' ')" \
    | tee -a "$out/summary.txt"
  ((rc == 0)) || status=1
done

((kv_case)) || exit "$status"
# A KV cache beyond the device: a named error and exit status 1 (never a signal).
name=memory_kv_too_large
timeout 300 "$bin" bench throughput "$model" --device cuda --load-format dummy --quantization fp8 \
  --num-prompts 4 --input-len 64 --output-len 8 --kv-cache-memory 200000000000 > "$out/$name.txt" 2>&1
rc=$?
if ((rc == 1)) && grep -q "kv-cache-memory.*out of memory" "$out/$name.txt"; then
  echo "$name: exit 1 with a named error (expected): $(tail -1 "$out/$name.txt")" | tee -a "$out/summary.txt"
else
  echo "$name: exit $rc, expected 1 with an out-of-memory error: $(tail -3 "$out/$name.txt" | tr '\n' ' ')" | tee -a "$out/summary.txt"
  status=1
fi
exit "$status"
