# The per-row model kernels (backend/cuda/elementwise/model_kernels.h) against the CPU
# backend's ops and RopeTable. Runs on a Hopper GPU; elsewhere every
# test reports SKIPPED.
add_executable(test_cuda_model_kernels ${CMAKE_CURRENT_LIST_DIR}/test_cuda_model_kernels.cpp)
target_link_libraries(test_cuda_model_kernels PRIVATE fp8lm_cuda fp8lm_cpu fp8lm_model fp8lm_test_support)
gtest_discover_tests(test_cuda_model_kernels DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
