source .gpu-bin/common.sh
export NCCL_NVLS_ENABLE=0
export FP8LM_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
TT=300 gtest test_cuda_tensor_parallel
TT=400 gtest test_cuda_model
grep -E "GPU TP=2" $R/test_cuda_tensor_parallel.log | head -3
