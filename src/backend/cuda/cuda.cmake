# ---- CUDA backend (Hopper, sm_90a) --------------------------------------------
# Included from src/CMakeLists.txt when the CUDA backend is built. One folder per op family,
# each listing its own sources in its own fragment (docs/architecture.md, "The CUDA backend's
# folders"; tools/check_includes.py checks that a fragment lists only its folder's files).
# This folder's own files: the op implementation (CudaOps) and the kernel plans.
add_library(fp8lm_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_sampling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_persistent.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_info.cpp)
target_include_directories(fp8lm_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(fp8lm_cuda PUBLIC fp8lm_numerics CUDA::cudart_static)
target_compile_definitions(fp8lm_cuda PUBLIC FP8LM_WITH_CUDA)
target_compile_options(fp8lm_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra,-Werror,-ffp-contract=off>)
# The shared backend layer only: the CUDA backend never links the CPU backend
# (tests that compare against it link fp8lm_cpu themselves).
target_link_libraries(fp8lm_cuda PUBLIC fp8lm_backend fp8lm_weights)

include(${CMAKE_CURRENT_LIST_DIR}/common/common.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/quant/quant.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gemm/gemm.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gemv/gemv.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/attention/attention.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/moe/moe.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/sampling/sampling.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/elementwise/elementwise.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/persistent/persistent.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/comm/comm.cmake)
