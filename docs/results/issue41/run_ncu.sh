# Issue 41: Nsight Compute on one persistent decode step (Llama-3.1-8B dummy FP8, batch 1, 1,024
# in): the warp-state statistics and the per-instruction stall samples of decode_kernel, and the
# layered path's kernels of one step beside it. Carry gpu-persistent.tar.xz (fp8lm built with
# -lineinfo for decode_kernel.cu). Writes $OUT/ncu.tar.xz.
set -u
R=${OUT:-/tmp/out}; mkdir -p $R/n /tmp/f; tar xJf gpu-persistent.tar.xz -C /tmp/f
lt=$(ldconfig -p | awk '/libcublasLt.so/ {print $NF; exit}')
export LD_LIBRARY_PATH=/tmp/f:$(dirname "${lt:-/usr/lib}"):${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/n/device.txt
run() {  # run NAME KERNEL_REGEX DECODE_KERNEL SKIP COUNT SECTIONS...
  local name=$1 re=$2 dk=$3 skip=$4 count=$5; shift 5
  timeout 400 ncu --clock-control none --kernel-name regex:"$re" --launch-skip $skip --launch-count $count \
    "$@" --import-source yes -f -o $R/n/$name \
    /tmp/f/${BIN:-fp8lm} bench latency bench/configs/llama-3.1-8b --device cuda --load-format dummy --quantization fp8 \
    --decode-kernel $dk --batch-size 1 --input-len 1024 --output-len 8 --iters 1 --warmup 0 > $R/n/$name.log 2>&1
  echo "$name exit $?"
  ncu -i $R/n/$name.ncu-rep --page details --print-units base > $R/n/$name.details.txt 2>&1
  ncu -i $R/n/$name.ncu-rep --page source --csv --print-source sass > $R/n/$name.sass.csv 2>&1
  ls -la $R/n/$name.*
}
run persistent 'decode_kernel' persistent 3 1 --set full
[[ ${LAYERED:-1} == 1 ]] && run layered_gemv 'gemv_kernel' layered 200 8 --set full
(cd $R && tar cJf ncu.tar.xz n && rm -rf n)
