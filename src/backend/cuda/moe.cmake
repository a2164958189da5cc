# Sparse MoE blocks on the GPU (CudaOps::upload_moe_experts / moe, cuda_ops_moe.cpp): the routing
# and combine kernels (moe_kernels.h), the grouped GEMV for BF16 experts (the FP8 one is
# fp8_gemv.h's grouped form); the experts are ordinary linear layers.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bf16_gemv_grouped.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/moe_kernels.cu)
