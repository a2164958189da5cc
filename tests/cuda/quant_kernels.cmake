# The quantization kernels against the CPU reference (numerics/quantize, numerics/silu).
# Runs on a Hopper GPU; elsewhere every test reports SKIPPED.
add_executable(test_cuda_quant ${CMAKE_CURRENT_LIST_DIR}/test_cuda_quant.cpp)
target_link_libraries(test_cuda_quant PRIVATE fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_quant DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
# Producers that quantize their output (RMSNorm) against producer + quantization kernel.
add_executable(test_cuda_fused_quant ${CMAKE_CURRENT_LIST_DIR}/test_cuda_fused_quant.cpp)
target_link_libraries(test_cuda_fused_quant PRIVATE fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_fused_quant DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
