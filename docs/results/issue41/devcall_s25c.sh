# Issue 41, a new build (fp8lm, test_cuda_persistent) against main's (fp8lm_v9) in the least device time (~150 s): its tests (the wide and
# architecture ones; all of them when the shipped model's weights come along, below), the copy
# bandwidth, layered FP8, the new build and v9 at Llama-3.1-8B dummy FP8 batch 1 (1,024 in / 128 out)
# (BLOCKS=1: also FP8 blocks, both paths), then the new build's profile if time is left. Carry
# gpu-persistent.tar.xz (pack_s26.sh; earlier: fp8lm = v10 from persistent_v10.patch).
set -u
T=${T:-200}; t0=$SECONDS
R=$OUT
source docs/results/issue41/devcall_tests.sh gpu-persistent.tar.xz
python3 docs/results/issue41/copy_bandwidth.py > $R/copy.txt; bw=$(awk '{print $2"T"}' $R/copy.txt); cat $R/copy.txt
# lat BINARY KERNEL NAME [ARGS]: Q = the --quantization (fp8 unless set; none: BF16).
lat() { local q=(--quantization ${Q:-fp8}); [[ ${Q:-} == none ]] && q=()
  timeout 60 /tmp/f/$1 bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${q[@]}" --decode-kernel $2 --batch-size 1 --input-len 1024 --output-len ${OL:-128} --iters 3 --roofline-bandwidth $bw --json $R/$3.json "${@:4}" > $R/$3.log 2>&1; echo "$3 exit $?: $(grep -E 'TPOT median' $R/$3.log | tr -s ' ')"; }
lat fp8lm layered lat_layered
[[ -n ${BLOCKS:-} ]] && Q=none lat fp8lm layered lat_layered_bf16   # FP8 ÷ BF16 in the same call
ran && lat fp8lm persistent lat_new
# 128 x 128 blocks x 1 x 128 groups, both paths (the issue: blocks within 3 % of per-channel), when the new build runs them.
if ran && [[ -n ${BLOCKS:-} ]]; then
  Q=fp8:block lat fp8lm layered lat_layered_block; Q=fp8:block lat fp8lm persistent lat_new_block
fi
lat fp8lm_v9 persistent lat_v9
# A diagnostic build when carried (fp8lm_nowait: v10 with wait_for's spin removed — wrong results, the
# stream and consumers' pace without the phase waits).
[[ -x /tmp/f/fp8lm_nowait ]] && lat fp8lm_nowait persistent lat_nowait
if ran && (( SECONDS - t0 < T - 40 )); then
  OL=32 lat fp8lm persistent prof_new --profile; sed -n '/op profile, decode/,/profiled iteration/p' $R/prof_new.log
fi
[[ -n ${NOTAR:-} ]] || { cd $R && tar cJf /tmp/all.tar.xz . && find . -mindepth 1 -delete && mv /tmp/all.tar.xz all.tar.xz; }
