# The FP8 decode GEMV (src/backend/cuda/gemv/fp8_gemv.h): its test against the CPU linear layer
# and its benchmark against cuBLASLt's BF16 GEMM (docs/benchmarks.md, issue 8).
add_executable(test_cuda_gemv cuda/test_cuda_gemv.cpp)
target_link_libraries(test_cuda_gemv PRIVATE fp8lm_cuda fp8lm_cpu fp8lm_test_support)
gtest_discover_tests(test_cuda_gemv DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)

# A plain program (not a test): bench_cuda_gemv [results.json] [--sweep]
add_executable(bench_cuda_gemv cuda/bench_cuda_gemv.cpp)
target_link_libraries(bench_cuda_gemv PRIVATE fp8lm_cuda CUDA::cublasLt nlohmann_json::nlohmann_json)
