#!/usr/bin/env bash
# Decode attention on the H200 (issue 19), in one device call: the attention GPU tests under each
# decode form, bench_cuda_attention under each form (the kernel alone against its K/V bandwidth
# roofline), and with --ncu an Nsight Compute profile of the batch-256 decode kernel of the first
# form (where its time goes: throughput against the memory roofline, warp stall reasons).
# Results under $OUT (default ./gpu-results):
#   test_cuda_attention_<form>.log   the GPU tests with that form's switches
#   attention_<form>.{md,json}      bench_cuda_attention's table and numbers
#   ncu_<form>_<kv>.txt             the profile (--ncu)
# Forms: split (the default: the tensor-core decode kernel, the context split at small batches
# up to 4 CTAs an SM), simt (FP8LM_CUDA_DECODE_SPLIT=0: the split SIMT kernel below 2 × the SMs
# (sequence, KV head) pairs), and for the benchmark only pairs (FP8 decode rows on the
# warp-per-pair kernel wherever the rows fit, not only from 12 pairs an SM:
# bench_cuda_attention --decode-kernel pairs) and keysplit (never on it: the key-split CTAs at
# every batch, --decode-kernel key-split). test_cuda_attention runs both FP8 decode kernels on
# every problem they fit under any form, so the test skips those two.
#
#   bash scripts/gpu_attention.sh [--ncu] [--forms "split simt keysplit"] [--test-forms "split simt" | none]
#                                 [bench options, e.g. --batch 256]
#
# Binaries: $FP8LM_BIN (a directory holding test_cuda_attention and bench_cuda_attention, as
# scripts/pack_gpu_binaries.sh packs them), else build/tests and build/bench.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
forms="split simt" test_forms="" ncu=0 bench_args=()
while (($#)); do
  case "$1" in
    --ncu) ncu=1 ;;
    --forms) forms=$2; shift ;;
    --test-forms) test_forms=$2; shift ;;
    *) bench_args+=("$1") ;;
  esac
  shift
done
test_forms=${test_forms:-$forms}
[[ $test_forms == none ]] && test_forms=""  # --test-forms none: benchmarks only
test_bin=${FP8LM_BIN:+$FP8LM_BIN/test_cuda_attention}
test_bin=${test_bin:-build/tests/test_cuda_attention}
bench_bin=${FP8LM_BIN:+$FP8LM_BIN/bench_cuda_attention}
bench_bin=${bench_bin:-build/bench/bench_cuda_attention}

# The environment of a form, as `env` arguments.
form_env() {
  case "$1" in
    split | pairs | keysplit) echo "FP8LM_CUDA_DECODE_SPLIT=1" ;;
    simt) echo "FP8LM_CUDA_DECODE_SPLIT=0" ;;
    *) echo "gpu_attention.sh: unknown form $1 (split, simt, pairs, keysplit)" >&2; exit 2 ;;
  esac
}

# bench_cuda_attention's own arguments for a form.
form_bench_args() {
  case "$1" in
    pairs) echo "--decode-kernel pairs" ;;
    keysplit) echo "--decode-kernel key-split" ;;
  esac
}

for f in $test_forms; do
  e=$(form_env "$f") || exit 2
  case "$f" in
    pairs | keysplit) echo "test_cuda_attention ($f): skipped (the test forces both FP8 decode kernels itself)"; continue ;;
  esac
  # shellcheck disable=SC2086
  env $e timeout 300 "$test_bin" > "$out/test_cuda_attention_$f.log" 2>&1
  echo "test_cuda_attention ($f): exit $? $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda_attention_$f.log" | tr '\n' ' ')"
done
for f in $forms; do
  e=$(form_env "$f") || exit 2
  fb=$(form_bench_args "$f")
  # shellcheck disable=SC2086
  env $e timeout 300 "$bench_bin" "${bench_args[@]}" $fb --json "$out/attention_$f.json" > "$out/attention_$f.md" 2>&1
  echo "bench_cuda_attention ($f): exit $?"
  cat "$out/attention_$f.md"
done
if ((ncu)); then
  # One batch-256 call of the decode kernel after the warm-up, the kernel's own sections only;
  # the clocks left as they are (METHOD.md).
  f=${forms%% *}
  e=$(form_env "$f")
  fb=$(form_bench_args "$f")
  for kv in bf16 e4m3; do
    # shellcheck disable=SC2086
    env $e timeout 300 ncu --clock-control none --kernel-name "regex:warp_decode_kernel" --launch-skip 5 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats "$bench_bin" --batch 256 --kv "$kv" --iters 5 $fb > "$out/ncu_${f}_$kv.txt" 2>&1
    echo "ncu ($f, $kv): exit $?"
  done
fi
