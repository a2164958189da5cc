# ---- CUDA backend (Hopper, sm_90a) --------------------------------------------
# Included from src/CMakeLists.txt when the CUDA backend is built. Each part of
# the backend lists its sources in its own .cmake file beside them (GEMMs,
# quantization kernels, the decode GEMV), added to fp8lm_cuda.
add_library(fp8lm_cuda STATIC
  ${CMAKE_CURRENT_LIST_DIR}/check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_info.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fp8_cast.cu)
target_include_directories(fp8lm_cuda PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(fp8lm_cuda PUBLIC fp8lm_numerics CUDA::cudart_static)
target_compile_definitions(fp8lm_cuda PUBLIC FP8LM_WITH_CUDA)
target_compile_options(fp8lm_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra,-Werror,-ffp-contract=off>)
include(${CMAKE_CURRENT_LIST_DIR}/gemm.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/cutlass.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/quant_kernels.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/gemv.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/attention.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/model_kernels.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/sampling.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/moe.cmake OPTIONAL)
