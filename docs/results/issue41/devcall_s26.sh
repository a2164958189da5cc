# One device call (~330 s; built by pack_s26.sh): issue 41's v11 (v10 and the block / tensor / W8A16
# schemes) against v9 (devcall_s25c.sh: tests, copy bandwidth, layered FP8 per-channel and block, v11 on both, v9, the no-wait diagnostic, v11's profile), the weight ring alone
# (bench_cuda_weight_stream: stream, products, phases, attention's gap), then issue 43's step cost
# (docs/results/issue43/run_step_cost.sh, with the same fp8lm: its bench throughput runs the layered
# path, which v11 leaves as it is). Carry gpu-persistent.tar.xz, .model and .so. Everything comes
# back as $OUT/all.tar.xz (i41/, i43/).
set -u
O=$OUT
mkdir -p $O/i41 $O/i43
OUT=$O/i41 NOTAR=1 BLOCKS=1 T=${T:-330} bash docs/results/issue41/devcall_s25c.sh
timeout 60 /tmp/f/bench_cuda_weight_stream --json $O/i41/weight_stream.json > $O/i41/weight_stream.txt 2>&1
cat $O/i41/weight_stream.txt
ln -sf gpu-persistent.tar.xz gpu-structured.tar.xz
OUT=$O/i43 timeout $(( SECONDS < 420 ? 570 - SECONDS : 150 )) bash docs/results/issue43/run_step_cost.sh
cd $O && tar cJf /tmp/all.tar.xz i41 i43 && rm -rf i41 i43 && mv /tmp/all.tar.xz all.tar.xz
