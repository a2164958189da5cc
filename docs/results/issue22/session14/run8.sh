source .gpu-bin/common.sh
free -g | head -2
FP8LM_BIN=/tmp/b OUT=$R timeout 560 bash scripts/gpu_tensor_parallel.sh --gpus 1 --batches "1 64" --input-len 1024 --output-len 128
cat $R/summary.txt
grep -E "TTFT|TPOT|decode weight|prefill linear|weights MiB|load|roofline" $R/bench_70b_fp8_tp1_b1.txt | head -20
