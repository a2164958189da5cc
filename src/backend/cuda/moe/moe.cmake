# MoE routing, grouping and combining on the device (moe_kernels.h); the experts' products are
# gemv/'s and gemm/'s grouped forms, the block itself CudaOps' (cuda_ops_moe.cpp).
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/moe_kernels.cu)
