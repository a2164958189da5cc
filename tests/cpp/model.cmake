# The model forward pass and generation against transformers
# (tools/make_model_fixtures.py → tests/fixtures/models).
add_executable(test_model
  ${CMAKE_CURRENT_LIST_DIR}/test_model_logits.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_model_batching.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_generate.cpp)
target_link_libraries(test_model PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_model DISCOVERY_TIMEOUT 60)
