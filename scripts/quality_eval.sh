#!/usr/bin/env bash
# What FP8 costs the shipped model in quality (docs/quality.md): perplexity on
# WikiText-2 test and KL divergence against the BF16 model on the same tokens,
# for online FP8 at every granularity, each `fp8lm quantize` preset (static
# scales and KV scales calibrated on WikiText-2 validation), and FP8 KV caches
# with scale 1.0 and with calibrated scales. One JSON per run under $OUT.
#
#   FP8LM_BIN=build/src/fp8lm DATA_DIR=../shared/data/wikitext-2-raw OUT=quality \
#     WINDOWS=50 THREADS=16 bash scripts/quality_eval.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FP8LM_BIN:-build/src/fp8lm}
data=${DATA_DIR:-../shared/data/wikitext-2-raw}
out=${OUT:-quality-results}
windows=${WINDOWS:-50}
threads=${THREADS:-0}
model=models/fp8lm-gutenberg-22m
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# The quantized checkpoints (static scales and KV scales from the validation split).
for scheme in FP8_DYNAMIC FP8_BLOCK; do
  "$bin" quantize "$model" --out "$work/$scheme" --scheme "$scheme" > /dev/null
done
"$bin" quantize "$model" --out "$work/FP8" --scheme FP8 --calib "$data/wiki.valid.raw" \
  --calib-samples 32 --calib-seq-len 1024 --threads "$threads" > /dev/null 2>&1
"$bin" quantize "$model" --out "$work/FP8_DYNAMIC_KV" --scheme FP8_DYNAMIC --kv-cache-dtype fp8 \
  --calib "$data/wiki.valid.raw" --calib-samples 32 --calib-seq-len 1024 --threads "$threads" > /dev/null 2>&1

run() {  # name, model dir, extra flags...
  local name=$1 dir=$2
  shift 2
  local start=$SECONDS
  "$bin" eval perplexity "$dir" --data "$data/wiki.test.raw" --ctx 1024 --limit-windows "$windows" \
    --threads "$threads" --kl-divergence-base "$model" "$@" --json "$out/$name.json" > /dev/null 2> "$out/$name.log"
  echo "$name: $((SECONDS - start)) s"
}
run bf16 "$model"
run online_fp8_tensor "$model" --quantization fp8:tensor
run online_fp8_channel "$model" --quantization fp8:channel
run online_fp8_block "$model" --quantization fp8:block
run online_fp8_weight_only "$model" --quantization fp8:weight-only
run online_fp8_channel_fp8_embeddings "$model" --quantization fp8:channel --fp8-embeddings
run ckpt_FP8_DYNAMIC "$work/FP8_DYNAMIC"
run ckpt_FP8 "$work/FP8"
run ckpt_FP8_BLOCK "$work/FP8_BLOCK"
run kv_fp8_scale_one "$model" --kv-cache-dtype fp8 --no-kv-calibration
run kv_fp8_calibrated_at_load "$model" --kv-cache-dtype fp8
run ckpt_FP8_DYNAMIC_kv_calibrated "$work/FP8_DYNAMIC_KV"
run kv_fp8_e5m2 "$model" --kv-cache-dtype fp8_e5m2
# FP8 attention (issue 44) on the calibrated E4M3 cache: against BF16, and against the same FP8 cache
# with float attention (its own effect alone).
run kv_fp8_fp8_attention "$model" --kv-cache-dtype fp8 --fp8-attention
run kv_fp8_fp8_attention_vs_kv_fp8 "$model" --kv-cache-dtype fp8 --fp8-attention --base-kv-cache-dtype fp8
