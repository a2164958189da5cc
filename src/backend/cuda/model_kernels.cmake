# The per-row model kernels (model_kernels.h): embedding, RMSNorm (plain, fused
# with the residual add, per head), add, RoPE, SiLU·mul, gather, argmax; and
# the fused q/k/v split + q/k norm + RoPE (qkv_rope_kernels.h), which shares
# their norm and RoPE arithmetic (norm_rope_device.cuh).
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/model_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/qkv_rope_kernels.cu)
