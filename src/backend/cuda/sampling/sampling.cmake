# Sampling on the device (sampling_kernels.h); the op that runs it is CudaOps::sample_rows
# (cuda_ops_sampling.cpp).
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sampling_kernels.cu)
