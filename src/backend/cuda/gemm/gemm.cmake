# Matrix products at prefill sizes: cuBLASLt's BF16 and FP8 GEMMs (cublaslt_gemm.h) with the
# scale grids converted to its layouts (gemm_scales.cu); CUTLASS's FP8 GEMMs, dense and grouped,
# where the headers are there (cutlass.cmake). Adds to fp8lm_cuda.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cublaslt_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_scales.cu)
target_link_libraries(fp8lm_cuda PUBLIC CUDA::cublasLt)
include(${CMAKE_CURRENT_LIST_DIR}/cutlass.cmake)
