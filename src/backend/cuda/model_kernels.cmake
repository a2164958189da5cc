# The per-row model kernels (model_kernels.h): embedding, RMSNorm (plain, fused
# with the residual add, per head), add, RoPE, SiLU·mul, gather, argmax.
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/model_kernels.cu)
