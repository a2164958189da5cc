# Paged KV-cache stores and paged attention on the GPU (src/backend/cuda/attention/paged_attention.h)
# against the CPU cache and attention (src/backend/cpu/kv_cache.h, attention.h).
add_executable(test_cuda_attention cuda/test_cuda_attention.cpp)
target_link_libraries(test_cuda_attention PRIVATE fp8lm_cuda fp8lm_cpu fp8lm_test_support)
gtest_discover_tests(test_cuda_attention DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
