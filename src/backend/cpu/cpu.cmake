# ---- CPU backend: the ops the model runs on any CPU ---------------------------
# Included from src/CMakeLists.txt; paths are relative to this file.
add_library(fp8lm_cpu STATIC
  ${CMAKE_CURRENT_LIST_DIR}/linear.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_kernels_scalar.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kv_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mla_attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/thread_group.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_rank_group.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_ops_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/host_memory.cpp)
target_link_libraries(fp8lm_cpu PUBLIC fp8lm_numerics fp8lm_common fp8lm_io fp8lm_weights)

# The vector loops get their instruction sets in their own files only; they
# run after a run-time CPU check (linear_kernels_avx2/avx512()).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_sources(fp8lm_cpu PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/linear_kernels_avx2.cpp
    ${CMAKE_CURRENT_LIST_DIR}/linear_kernels_avx512.cpp)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/linear_kernels_avx2.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  # Same GCC 12 false positives in avx512fintrin.h as numerics/cpu/kernels_avx512.cpp.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/linear_kernels_avx512.cpp PROPERTIES
    COMPILE_OPTIONS "-mavx512f;$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized;-Wno-maybe-uninitialized>")
  target_compile_definitions(fp8lm_cpu PRIVATE FP8LM_LINEAR_HAVE_AVX2 FP8LM_LINEAR_HAVE_AVX512)
endif()
