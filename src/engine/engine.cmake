# The engine (src/engine): sampling, stop conditions, KV-cache block bookkeeping.
add_library(fp8lm_engine STATIC
  ${CMAKE_CURRENT_LIST_DIR}/sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop_checker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/block_allocator.cpp)
target_include_directories(fp8lm_engine PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(fp8lm_engine PUBLIC fp8lm_io)
