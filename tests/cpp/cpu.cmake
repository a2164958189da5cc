# The CPU backend's ops (src/backend/cpu), against PyTorch fixtures (tools/make_linear_fixtures.py,
# tools/make_attention_fixtures.py).
add_executable(test_cpu_backend cpp/test_cpu_linear.cpp cpp/test_cpu_attention.cpp)
target_link_libraries(test_cpu_backend PRIVATE fp8lm_cpu fp8lm_test_support)
gtest_discover_tests(test_cpu_backend DISCOVERY_TIMEOUT 60)
