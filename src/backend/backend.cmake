# ---- backend: what every backend shares (ops.h, the paged KV cache's types) ----
# Included from src/CMakeLists.txt before the backends; paths are relative to this file.
add_library(fp8lm_backend STATIC
  ${CMAKE_CURRENT_LIST_DIR}/ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/paged_kv_types.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sampling.cpp)
target_link_libraries(fp8lm_backend PUBLIC fp8lm_weights)
