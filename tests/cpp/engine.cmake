# Tests of the engine's sampler (against transformers' logits processors,
# tools/make_sampler_fixtures.py), stop strings, KV blocks and speculative decoding's pieces.
add_executable(test_engine
  ${CMAKE_CURRENT_LIST_DIR}/test_sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_stop_checker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_block_allocator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_speculative.cpp)
target_link_libraries(test_engine PRIVATE fp8lm_engine fp8lm_test_support)
gtest_discover_tests(test_engine DISCOVERY_TIMEOUT 60)
