# spec (src/spec): what a model is — architecture, tensor names, RoPE, FP8
# schemes — as plain data, read by io and used by everything above it.
add_library(fp8lm_spec STATIC
  ${CMAKE_CURRENT_LIST_DIR}/quant_scheme.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rope.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eagle3_head.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_tensors.cpp)
target_link_libraries(fp8lm_spec PUBLIC fp8lm_numerics)
