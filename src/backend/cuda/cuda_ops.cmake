# The CUDA backend's op implementation (cuda_ops.h): the model's ops on the GPU.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear_plan.cpp)
# The shared backend layer only: the CUDA backend never links the CPU backend
# (tests that compare against it link fp8lm_cpu themselves).
target_link_libraries(fp8lm_cuda PUBLIC fp8lm_backend fp8lm_weights)
