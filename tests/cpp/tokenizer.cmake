# Tests of the tokenizer (src/tokenizer), against ids made by Hugging Face
# `tokenizers` (tools/make_tokenizer_fixtures.py).
add_executable(test_tokenizer
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_vs_hf.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_streaming.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_errors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_limit.cpp)
target_link_libraries(test_tokenizer PRIVATE fp8lm_tokenizer fp8lm_test_support)
gtest_discover_tests(test_tokenizer DISCOVERY_TIMEOUT 60)
