# The whole model on the GPU (src/backend/cuda/cuda_ops.h) against the CPU backend.
add_executable(test_cuda_model cuda/test_cuda_model.cpp cuda/test_cuda_eagle3.cpp)
target_link_libraries(test_cuda_model PRIVATE fp8lm_runtime fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_model DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
# The CUDA backend's plan per linear layer (src/backend/cuda/linear_plan.h): host
# code, so it runs without a GPU, but it builds only with the CUDA backend.
add_executable(test_cuda_linear_plan cuda/test_cuda_linear_plan.cpp)
target_link_libraries(test_cuda_linear_plan PRIVATE fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_linear_plan DISCOVERY_TIMEOUT 60)
# MoE blocks on the GPU (src/backend/cuda/cuda_ops_moe.cpp) against the CPU backend's.
add_executable(test_cuda_moe cuda/test_cuda_moe.cpp)
target_link_libraries(test_cuda_moe PRIVATE fp8lm_runtime fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_moe DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
add_executable(test_cuda_moe_grouped cuda/test_cuda_moe_grouped.cpp)
target_link_libraries(test_cuda_moe_grouped PRIVATE fp8lm_runtime fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_moe_grouped DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
# Tensor parallelism on CUDA ranks (src/backend/cuda/comm/nccl_group.h, CudaOps' collectives).
add_executable(test_cuda_tensor_parallel cuda/test_cuda_tensor_parallel.cpp)
target_link_libraries(test_cuda_tensor_parallel PRIVATE fp8lm_runtime fp8lm_cuda fp8lm_cpu fp8lm_test_support)
target_include_directories(test_cuda_tensor_parallel SYSTEM PRIVATE ${FP8LM_NCCL_INCLUDE_DIR})
gtest_discover_tests(test_cuda_tensor_parallel DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
# The persistent decode kernel (src/backend/cuda/persistent/) against the layered decode.
add_executable(test_cuda_persistent cuda/test_cuda_persistent.cpp)
target_link_libraries(test_cuda_persistent PRIVATE fp8lm_runtime fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_persistent DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
# Its schedule (host code: runs without a GPU).
add_executable(test_cuda_persistent_schedule cuda/test_cuda_persistent_schedule.cpp)
target_link_libraries(test_cuda_persistent_schedule PRIVATE fp8lm_cuda fp8lm_test_support)
gtest_discover_tests(test_cuda_persistent_schedule DISCOVERY_TIMEOUT 60)
