source .gpu-bin/common.sh
export NCCL_NVLS_ENABLE=0
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[[ -f $nccl ]] || nccl=$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)
export FP8LM_NCCL_LIBRARY=$nccl
echo "nccl: $nccl"; python3 -m pip show nvidia-nccl-cu13 2>/dev/null | grep -i version
TT=300 gtest test_cuda_tensor_parallel
TT=200 gtest test_cuda_model_kernels
grep -E "GPU TP=2|NCCL \]" $R/test_cuda_tensor_parallel.log
M=models/fp8lm-gutenberg-22m
/tmp/b/fp8lm generate $M --device cuda --quantization fp8 --kv-cache-dtype fp8 --temperature 0 --max-tokens 32 --prompt "It was a dark and stormy night" 2>&1 | tail -3
/tmp/b/fp8lm generate $M --device cuda --tp 2 --max-tokens 4 --prompt "x" 2>&1 | tail -2
/tmp/b/fp8lm generate $M --device cpu --tp 2 --temperature 0 --quantization fp8 --kv-cache-dtype fp8 --max-tokens 32 --prompt "It was a dark and stormy night" 2>&1 | tail -2
