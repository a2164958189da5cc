# ---- CUDA backend: FP8 GEMMs through CUTLASS (issue 19) ------------------------
# Included from gemm.cmake. CUTLASS is header-only: scripts/build.sh unpacks PyPI's
# pinned nvidia-cutlass into .deps/cutlass (include/ and util/include/); FP8LM_CUTLASS_DIR
# points elsewhere. Without the headers the backend builds without these kernels.
set(FP8LM_CUTLASS_DIR "${CMAKE_SOURCE_DIR}/.deps/cutlass" CACHE PATH
    "CUTLASS headers: a folder with include/ and util/include/ (scripts/build.sh fetches them)")
if(EXISTS "${FP8LM_CUTLASS_DIR}/include/cutlass/cutlass.h" AND
   EXISTS "${FP8LM_CUTLASS_DIR}/util/include/cutlass/util/packed_stride.hpp")
  message(STATUS "fp8lm: CUTLASS headers in ${FP8LM_CUTLASS_DIR}: the CUTLASS FP8 GEMM is built")
  # One file per kernel configuration (cutlass_fp8_gemm_configs.h), so that they compile in parallel.
  target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cutlass_fp8_gemm.cu
    ${CMAKE_CURRENT_LIST_DIR}/cutlass_fp8_gemm_stream_k_128x128.cu
    ${CMAKE_CURRENT_LIST_DIR}/cutlass_fp8_gemm_pingpong_64x128.cu
    # The grouped (ptr-array) GEMM of MoE experts: one file per scale scheme.
    ${CMAKE_CURRENT_LIST_DIR}/cutlass_fp8_grouped_gemm.cu
    ${CMAKE_CURRENT_LIST_DIR}/cutlass_fp8_grouped_gemm_outer.cu
    ${CMAKE_CURRENT_LIST_DIR}/cutlass_fp8_grouped_gemm_block.cu)
  # SYSTEM: their own warnings are not ours (fp8lm's sources build with -Werror).
  target_include_directories(fp8lm_cuda SYSTEM PRIVATE
    "${FP8LM_CUTLASS_DIR}/include" "${FP8LM_CUTLASS_DIR}/util/include")
  target_compile_definitions(fp8lm_cuda PUBLIC FP8LM_WITH_CUTLASS)
else()
  message(STATUS "fp8lm: no CUTLASS headers in ${FP8LM_CUTLASS_DIR} (scripts/build.sh fetches them): "
                 "the CUDA backend builds without the CUTLASS FP8 GEMM")
endif()
