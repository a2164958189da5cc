# The weights layer (src/weights): element types and their mappings, the host
# description of linear weights (validation, concatenation), the weight quantizer.
add_executable(test_weights ${CMAKE_CURRENT_LIST_DIR}/test_weights.cpp)
target_link_libraries(test_weights PRIVATE fp8lm_weights fp8lm_test_support)
gtest_discover_tests(test_weights DISCOVERY_TIMEOUT 60)
