# The weights layer (src/weights): element types and their mappings, the host
# description of linear weights (validation, concatenation), the weight quantizer.
add_executable(test_weights ${CMAKE_CURRENT_LIST_DIR}/test_weights.cpp)
target_link_libraries(test_weights PRIVATE fp8lm_weights fp8lm_test_support)
gtest_discover_tests(test_weights DISCOVERY_TIMEOUT 60)

# Tensor-parallel slices of a weight and the re-scaling of cells a slice cuts (issue 22).
add_executable(test_shard_weight ${CMAKE_CURRENT_LIST_DIR}/test_shard_weight.cpp)
target_link_libraries(test_shard_weight PRIVATE fp8lm_weights fp8lm_test_support)
gtest_discover_tests(test_shard_weight DISCOVERY_TIMEOUT 60)
