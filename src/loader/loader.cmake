# loader (src/loader): a checkpoint (or dummy weights) → the host model, each
# linear a weights::LinearWeight in the scheme the backend will plan for.
add_library(fp8lm_loader STATIC
  ${CMAKE_CURRENT_LIST_DIR}/host_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dummy_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eagle3_weights.cpp)
target_link_libraries(fp8lm_loader PUBLIC fp8lm_io fp8lm_weights)
