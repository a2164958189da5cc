# What every CUDA file shares: errors with context (check.h), the caching allocator
# (device_memory.h), streams, launches, device conversions and helpers. Adds to fp8lm_cuda.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_memory.cpp)
