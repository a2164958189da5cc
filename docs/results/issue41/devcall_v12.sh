# Issue 41's v12 (the GEMV tiles claimed at run time) in one device call (~250 s; pack_v12.sh builds
# it): v12's tests (all, with the shipped model's weights carried in .model), the copy bandwidth,
# layered FP8 and BF16, v12 and v11 at Llama-3.1-8B dummy FP8 batch 1 and 8 (1,024 in / 128 out),
# v12 on 128 x 128 blocks, and v12's profile. Carry gpu-v12.tar.xz and .model; everything comes
# back as $OUT/all.tar.xz.
set -u
R=$OUT
TESTS_S=150 source docs/results/issue41/devcall_tests.sh gpu-v12.tar.xz
python3 docs/results/issue41/copy_bandwidth.py > $R/copy.txt; bw=$(awk '{print $2"T"}' $R/copy.txt); cat $R/copy.txt
# lat BINARY KERNEL NAME BATCH: Q = the --quantization (fp8 unless set; none: BF16).
lat() { local q=(--quantization ${Q:-fp8}); [[ ${Q:-} == none ]] && q=()
  timeout 60 /tmp/f/$1 bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy "${q[@]}" --decode-kernel $2 \
    --batch-size $4 --input-len 1024 --output-len ${OL:-128} --iters 3 --roofline-bandwidth $bw --json $R/$3.json "${@:5}" \
    > $R/$3.log 2>&1; echo "$3 exit $?: $(grep -E 'TPOT median' $R/$3.log | tr -s ' ')"; }
(
lat fp8lm layered lat_layered_b1 1
Q=none lat fp8lm layered lat_layered_bf16_b1 1
if ran; then
  lat fp8lm persistent lat_v12_b1 1
  lat fp8lm_v11 persistent lat_v11_b1 1
  lat fp8lm layered lat_layered_b8 8
  lat fp8lm persistent lat_v12_b8 8
  Q=fp8:block lat fp8lm persistent lat_v12_block_b1 1
  Q=fp8:block lat fp8lm layered lat_layered_block_b1 1
  OL=32 lat fp8lm persistent prof_v12 1 --profile; sed -n '/op profile, decode/,/profiled iteration/p' $R/prof_v12.log
fi
) | tee $R/latency.txt
cd $R && tar cJf /tmp/all.tar.xz . && find . -mindepth 1 -delete && mv /tmp/all.tar.xz all.tar.xz
