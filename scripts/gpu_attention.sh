#!/usr/bin/env bash
# Decode attention on the H200 (issue 19), in one device call: the attention GPU tests under each
# decode form, bench_cuda_attention under each form (the kernel alone against its K/V bandwidth
# roofline), and with --ncu an Nsight Compute profile of the batch-256 tensor-core decode kernel
# (where its time goes: throughput against the memory roofline, warp stall reasons). Results
# under $OUT (default ./gpu-results):
#   test_cuda_attention_<form>.log   the GPU tests with that form's switches
#   attention_<form>.{md,json}      bench_cuda_attention's table and numbers
#   ncu_<form>_<kv>.txt             the profile (--ncu)
# Forms: warp (the default: each warp its own copy ring), offsets (the warp form with key offsets
# a tile ahead: FP8LM_CUDA_DECODE_OFFSETS_AHEAD=1), cta (the CTA-wide double buffer:
# FP8LM_CUDA_WARP_DECODE=0).
#
#   bash scripts/gpu_attention.sh [--ncu] [--forms "warp offsets cta"] [bench options, e.g. --batch 256]
#
# Binaries: $FP8LM_BIN (a directory holding test_cuda_attention and bench_cuda_attention, as
# scripts/pack_gpu_binaries.sh packs them), else build/tests and build/bench.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-results}
mkdir -p "$out"
forms="warp offsets cta" ncu=0 bench_args=()
while (($#)); do
  case "$1" in
    --ncu) ncu=1 ;;
    --forms) forms=$2; shift ;;
    *) bench_args+=("$1") ;;
  esac
  shift
done
test_bin=${FP8LM_BIN:+$FP8LM_BIN/test_cuda_attention}
test_bin=${test_bin:-build/tests/test_cuda_attention}
bench_bin=${FP8LM_BIN:+$FP8LM_BIN/bench_cuda_attention}
bench_bin=${bench_bin:-build/bench/bench_cuda_attention}

# The environment of a form, as `env` arguments.
form_env() {
  case "$1" in
    warp) echo "FP8LM_CUDA_WARP_DECODE=1 FP8LM_CUDA_DECODE_OFFSETS_AHEAD=0" ;;
    offsets) echo "FP8LM_CUDA_WARP_DECODE=1 FP8LM_CUDA_DECODE_OFFSETS_AHEAD=1" ;;
    cta) echo "FP8LM_CUDA_WARP_DECODE=0 FP8LM_CUDA_DECODE_OFFSETS_AHEAD=0" ;;
    *) echo "gpu_attention.sh: unknown form $1 (warp, offsets, cta)" >&2; exit 2 ;;
  esac
}

for f in $forms; do
  e=$(form_env "$f") || exit 2
  # shellcheck disable=SC2086
  env $e timeout 300 "$test_bin" > "$out/test_cuda_attention_$f.log" 2>&1
  echo "test_cuda_attention ($f): exit $? $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_cuda_attention_$f.log" | tr '\n' ' ')"
done
for f in $forms; do
  e=$(form_env "$f")
  # shellcheck disable=SC2086
  env $e timeout 300 "$bench_bin" "${bench_args[@]}" --json "$out/attention_$f.json" > "$out/attention_$f.md" 2>&1
  echo "bench_cuda_attention ($f): exit $?"
  cat "$out/attention_$f.md"
done
if ((ncu)); then
  # One batch-256 call of the decode kernel after the warm-up, the kernel's own sections only;
  # the clocks left as they are (METHOD.md).
  for f in $forms; do
    e=$(form_env "$f")
    kernel=warp_decode_kernel
    [[ $f == cta ]] && kernel=flash_attention_kernel
    for kv in bf16 e4m3; do
      # shellcheck disable=SC2086
      env $e timeout 300 ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip 5 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
        --section SchedulerStats "$bench_bin" --batch 256 --kv "$kv" --iters 5 > "$out/ncu_${f}_$kv.txt" 2>&1
      echo "ncu ($f, $kv): exit $?"
    done
  done
fi
