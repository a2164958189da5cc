# The cuBLASLt GEMMs against the CPU reference, and the caching allocator
# (src/backend/cuda/gemm/gemm.cmake). Runs on a Hopper GPU; SKIPPED elsewhere.
add_executable(test_cuda_gemm cuda/test_cuda_gemm.cpp)
target_link_libraries(test_cuda_gemm PRIVATE fp8lm_test_support fp8lm_cuda fp8lm_cpu)
gtest_discover_tests(test_cuda_gemm DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)

# The grouped CUTLASS FP8 GEMM of MoE experts against a float64 product (issue 20).
add_executable(test_cuda_grouped_gemm cuda/test_cuda_grouped_gemm.cpp)
target_link_libraries(test_cuda_grouped_gemm PRIVATE fp8lm_test_support fp8lm_cuda)
gtest_discover_tests(test_cuda_grouped_gemm DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
