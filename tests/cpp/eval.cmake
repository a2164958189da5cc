# The perplexity / KL-divergence arithmetic and windowing of src/eval (the end-to-end
# comparison with transformers is tests/python/test_eval.py).
add_executable(test_eval ${CMAKE_CURRENT_LIST_DIR}/test_eval.cpp)
target_link_libraries(test_eval PRIVATE fp8lm_eval fp8lm_test_support)
gtest_discover_tests(test_eval DISCOVERY_TIMEOUT 60)
