# The per-row kernels between the matrix products (model_kernels.h): embedding, RMSNorm (plain,
# fused with the residual add, per head), add, RoPE, SiLU·mul, gather, argmax, the all-gather's
# interleaving.
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/model_kernels.cu)
