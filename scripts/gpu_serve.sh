#!/usr/bin/env bash
# The serving benchmark on the H200 (issue 10): `fp8lm serve` on Llama-3.1-8B's
# architecture (or another config directory: --model) with dummy weights (--skip-tokenizer-init: prompts go as token
# ids), driven by `fp8lm bench serve` at several concurrencies, for BF16, FP8
# and FP8 + FP8 KV cache in turn. Results under $OUT (default ./gpu-results):
# serve_<config>.log (the server's stderr), serve_<config>_c<C>.{txt,json}
# (bench serve) and serve_<config>_c<C>.metrics (the server's /metrics after
# that run), and summary.txt. `fp8lm bench report $OUT/serve_*_c*.json --out report.html`
# draws them (each JSON names its configuration: bench serve --label).
#
#   bash scripts/gpu_serve.sh [--model bench/configs/qwen3-30b-a3b] [--configs "bf16 fp8 fp8+kv"] [--concurrency "1 16 64 256"]
#       [--input-len 1024] [--output-len 256] [--prompts-per-slot 2] [--server-args "--no-async-scheduling"]
#
# Each concurrency C sends max(8, C × prompts-per-slot) prompts at once
# (request rate inf, at most C in flight). Binaries: $FP8LM_BIN/fp8lm, else
# build/src/fp8lm (configured with -DFP8LM_CUDA=ON).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
model=bench/configs/llama-3.1-8b configs="bf16 fp8 fp8+kv" concurrency="1 16 64 256" input_len=1024 output_len=256 per_slot=2 server_args=""
port=${PORT:-8731}
while (($#)); do
  case "$1" in
    --model) model=$2; shift ;;
    --configs) configs=$2; shift ;;
    --concurrency) concurrency=$2; shift ;;
    --input-len) input_len=$2; shift ;;
    --output-len) output_len=$2; shift ;;
    --prompts-per-slot) per_slot=$2; shift ;;
    --server-args) server_args=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
fp8lm=${FP8LM_BIN:+$FP8LM_BIN/fp8lm}
fp8lm=${fp8lm:-build/src/fp8lm}
base="http://127.0.0.1:$port"

# GET a path from the server; no curl needed on the GPU machine.
http_get() {
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  cat <&3
  exec 3<&-
}

status=0
for cfg in $configs; do
  args=(--device cuda --load-format dummy --skip-tokenizer-init --max-num-seqs 256 --max-num-batched-tokens 8192)
  read -r -a extra <<< "$server_args"
  args+=("${extra[@]}")
  case "$cfg" in
    bf16) ;;
    fp8) args+=(--quantization fp8) ;;
    fp8+kv) args+=(--quantization fp8 --kv-cache-dtype fp8) ;;
    *) args+=(--quantization "$cfg") ;;
  esac
  name=${cfg//:/_}
  name=${name//+/_}
  "$fp8lm" serve "$model" "${args[@]}" --port "$port" --served-model-name "$(basename "$model")-dummy" \
    > "$out/serve_$name.log" 2>&1 &
  server=$!
  up=0
  for _ in $(seq 1 240); do  # weights are generated and graphs recorded: allow 2 minutes
    if http_get /health 2>/dev/null | grep -q "200 OK"; then up=1; break; fi
    kill -0 "$server" 2>/dev/null || break
    sleep 0.5
  done
  if ((!up)); then
    echo "serve $cfg: did not come up (see serve_$name.log)" | tee -a "$out/summary.txt"
    kill "$server" 2>/dev/null
    status=1
    continue
  fi
  for c in $concurrency; do
    n=$((c * per_slot))
    ((n < 8)) && n=8
    run="serve_${name}_c$c"
    timeout "${RUN_TIMEOUT:-300}" "$fp8lm" bench serve --base-url "$base" --num-prompts "$n" --request-rate inf \
      --max-concurrency "$c" --input-len "$input_len" --output-len "$output_len" --vocab-size 128000 \
      --label "$cfg" --json "$out/$run.json" > "$out/$run.txt" 2>&1
    rc=$?
    http_get /metrics > "$out/$run.metrics" 2>/dev/null
    echo "$run exit $rc: $(grep -E 'output tok/s|failed requests' "$out/$run.txt" | tr -s ' ' | tr '\n' ';')" |
      tee -a "$out/summary.txt"
    ((rc == 0)) || status=1
  done
  kill -INT "$server"
  wait "$server"
  echo "serve $cfg exit $?" | tee -a "$out/summary.txt"
done
exit "$status"
