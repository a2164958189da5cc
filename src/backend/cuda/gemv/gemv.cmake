# Matrix products at decode sizes: the FP8 weight-streaming GEMV and its grouped form for MoE
# experts (fp8_gemv.h), the grouped BF16 GEMV of BF16 experts (bf16_gemv_grouped.h).
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/fp8_gemv.cu
  ${CMAKE_CURRENT_LIST_DIR}/bf16_gemv_grouped.cu)
