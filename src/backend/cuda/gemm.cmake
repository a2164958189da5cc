# ---- CUDA backend: device memory, streams and the cuBLASLt GEMMs (issue 8) ----
# Included (OPTIONAL) from cuda.cmake; adds to fp8lm_cuda.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/device_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cublaslt_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm_scales.cu)
target_link_libraries(fp8lm_cuda PUBLIC CUDA::cublasLt)
