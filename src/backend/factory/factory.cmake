# ---- backend factory: Ops for a named device (the backends this build has) ----
# Included from src/CMakeLists.txt after the backends; paths are relative to this file.
add_library(fp8lm_backend_factory STATIC ${CMAKE_CURRENT_LIST_DIR}/make_ops.cpp)
target_link_libraries(fp8lm_backend_factory PUBLIC fp8lm_backend fp8lm_cpu)
if(FP8LM_WITH_CUDA)
  target_link_libraries(fp8lm_backend_factory PUBLIC fp8lm_cuda)
endif()
