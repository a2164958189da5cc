# The FP8 weight-streaming GEMM for decode sizes (issue 8): fp8_gemv.h.
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fp8_gemv.cu)
