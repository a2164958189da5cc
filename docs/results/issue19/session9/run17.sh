set -uo pipefail
source .gpu-bin/common.sh
export PATH=$PATH:/usr/local/cuda/bin
B=1,2,4,8,16,32,64,128,256
FP8LM_BIN=/tmp/b OUT=$R/attn timeout 330 bash scripts/gpu_attention.sh --forms "split transposed pairs" --test-forms "transposed pairs split" --batch $B 2>&1 | grep -vE '^\s*$' | head -70
echo "attn done $((SECONDS-t0))s"
fenv() { case $1 in split) echo X=1;; transposed) echo FP8LM_CUDA_DECODE_T=1;; pairs) echo FP8LM_CUDA_DECODE_PAIRS_MIN=0;; esac; }
for f in split transposed pairs; do env $(fenv $f) timeout 40 /tmp/b/bench_cuda_attention --batch 256,512,1024 --context 192 --json $R/attention_ctx192_$f.json > $R/attention_ctx192_$f.md 2>&1; echo "attn192 $f exit $? $((SECONDS-t0))s"; grep -E "^\| [0-9]" $R/attention_ctx192_$f.md; done
NCU="ncu --clock-control none --kernel-name regex:(warp|pair)_decode_kernel --launch-skip 5 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats"
for f in split pairs; do env $(fenv $f) timeout 60 $NCU /tmp/b/bench_cuda_attention --batch 1024 --context 192 --kv e4m3 --iters 5 > $R/ncu_ctx192_b1024_$f.txt 2>&1; echo "ncu192 $f exit $? $((SECONDS-t0))s"; grep -E "^\s+(Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per)" $R/ncu_ctx192_b1024_$f.txt | head -6; done
env $(fenv pairs) timeout 60 $NCU /tmp/b/bench_cuda_attention --batch 256 --kv e4m3 --iters 5 > $R/ncu_ctx1024_b256_pairs.txt 2>&1; echo "ncu1024 pairs exit $? $((SECONDS-t0))s"; grep -E "^\s+(Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy)" $R/ncu_ctx1024_b256_pairs.txt | head -5
timeout 60 /tmp/b/bench_flashinfer_decode --graphs --batch $B --json $R/fi_decode_graphs.json > $R/fi_decode_graphs.md 2>&1; echo "fi graphs exit $? $((SECONDS-t0))s"; cat $R/fi_decode_graphs.md
timeout 30 /tmp/b/bench_flashinfer_decode --graphs --batch 256,512,1024 --context 192 --json $R/fi_decode_ctx192.json > $R/fi_decode_ctx192.md 2>&1; echo "fi ctx192 exit $? $((SECONDS-t0))s"; grep -E "^\| [0-9]" $R/fi_decode_ctx192.md
echo "all done $((SECONDS-t0))s"
