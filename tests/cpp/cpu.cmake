# The CPU backend's ops (src/backend/cpu), against PyTorch fixtures (tools/make_linear_fixtures.py,
# tools/make_attention_fixtures.py); the op interface's default split_norm_rope_qkv on it.
add_executable(test_cpu_backend cpp/test_cpu_linear.cpp cpp/test_cpu_attention.cpp cpp/test_ops_split_norm_rope.cpp)
target_link_libraries(test_cpu_backend PRIVATE fp8lm_cpu fp8lm_test_support)
gtest_discover_tests(test_cpu_backend DISCOVERY_TIMEOUT 60)

# The CPU ranks' collectives for tensor parallelism (issue 22).
add_executable(test_thread_group cpp/test_thread_group.cpp)
target_link_libraries(test_thread_group PRIVATE fp8lm_cpu fp8lm_test_support)
gtest_discover_tests(test_thread_group DISCOVERY_TIMEOUT 60)
