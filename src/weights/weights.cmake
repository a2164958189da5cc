# ---- weights: the host description of linear / embedding weights ------------
# Included from src/CMakeLists.txt. ElementType and its every mapping, the
# LinearWeight the loader fills and the backends upload, the one weight quantizer, the
# tensor-parallel slices of a weight.
add_library(fp8lm_weights STATIC
  ${CMAKE_CURRENT_LIST_DIR}/element_type.cpp
  ${CMAKE_CURRENT_LIST_DIR}/element_type_maps.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linear_weight.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize_weight.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shard_weight.cpp)
target_link_libraries(fp8lm_weights PUBLIC fp8lm_io)
