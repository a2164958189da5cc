# model (src/model): the forward pass, written once over the backend op
# interface (backend/ops.h); it never names a backend.
add_library(fp8lm_model STATIC ${CMAKE_CURRENT_LIST_DIR}/llama_model.cpp ${CMAKE_CURRENT_LIST_DIR}/mla_layer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eagle3_head.cpp)
target_link_libraries(fp8lm_model PUBLIC fp8lm_loader fp8lm_backend)
