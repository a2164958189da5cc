# Sampling on the GPU (src/backend/cuda/sampling/sampling_kernels.h, CudaOps::sample_rows)
# against the host row math (backend/sampling.h). Runs on a Hopper GPU;
# elsewhere every test reports SKIPPED.
add_executable(test_cuda_sampling cuda/test_cuda_sampling.cpp)
target_link_libraries(test_cuda_sampling PRIVATE fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_sampling DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
