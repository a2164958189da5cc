# The CUDA backend's op implementation (cuda_ops.h): the model's ops on the GPU.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops_kernels.cu)
# fp8lm_cpu goes once the CUDA backend names no cpu:: symbol (issue 17, WP5).
target_link_libraries(fp8lm_cuda PUBLIC fp8lm_weights fp8lm_cpu)
