# The model forward pass (dense and MoE) and generation against transformers
# (tools/make_model_fixtures.py → tests/fixtures/models), and fp8lm quantize against
# LLM Compressor (tools/make_quantize_fixtures.py → tests/fixtures/quantize).
add_executable(test_model
  ${CMAKE_CURRENT_LIST_DIR}/test_model_logits.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_model_batching.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_deepseek.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_generate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_quantize.cpp)
target_link_libraries(test_model PRIVATE fp8lm_runtime fp8lm_calibration fp8lm_quantize fp8lm_test_support)
gtest_discover_tests(test_model DISCOVERY_TIMEOUT 60)

# The batched engine (continuous batching, speculative decoding) against engine::generate alone.
add_executable(test_engine_batching ${CMAKE_CURRENT_LIST_DIR}/test_engine_batching.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_engine_speculative.cpp ${CMAKE_CURRENT_LIST_DIR}/test_eagle3_drafter.cpp)
target_link_libraries(test_engine_batching PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_engine_batching DISCOVERY_TIMEOUT 60)

# --load-format dummy: random weights from config.json, against the real loader's storage.
add_executable(test_dummy_weights ${CMAKE_CURRENT_LIST_DIR}/test_dummy_weights.cpp)
target_link_libraries(test_dummy_weights PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_dummy_weights DISCOVERY_TIMEOUT 60 TEST_PREFIX "dummy_weights/")

# Backends own their memory: the KV budget's defaults (backend/ops.cpp) and the backend factory.
add_executable(test_backend_memory ${CMAKE_CURRENT_LIST_DIR}/test_backend_memory.cpp)
target_link_libraries(test_backend_memory PRIVATE fp8lm_backend_factory fp8lm_test_support)
gtest_discover_tests(test_backend_memory DISCOVERY_TIMEOUT 60)

# The KV cache on host memory (issue 39): the CPU's budget from the memory available, the runtime's
# max_model_len, and huge contexts (max_position_embeddings = 2^20..2^30) in bounded memory.
# --fp8-attention through the runtime (its numerics: test_cpu_attention.cpp).
add_executable(test_fp8_attention ${CMAKE_CURRENT_LIST_DIR}/test_fp8_attention.cpp)
target_link_libraries(test_fp8_attention PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_fp8_attention DISCOVERY_TIMEOUT 60)
add_executable(test_kv_budget ${CMAKE_CURRENT_LIST_DIR}/test_kv_budget.cpp)
target_link_libraries(test_kv_budget PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_kv_budget DISCOVERY_TIMEOUT 60)

# Decode steps padded to the CUDA graph ladder (backend::decode_graph_rows), forced
# on the CPU: real rows and their KV entries bit for bit those of unpadded steps.
add_executable(test_decode_padding ${CMAKE_CURRENT_LIST_DIR}/test_decode_padding.cpp)
target_link_libraries(test_decode_padding PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_decode_padding DISCOVERY_TIMEOUT 60)

# Tensor parallelism without a device (issue 22): the split of a model into ranks' host weights,
# and the model over CPU ranks against the model whole.
add_executable(test_tensor_parallel ${CMAKE_CURRENT_LIST_DIR}/test_tensor_parallel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_tensor_parallel_model.cpp ${CMAKE_CURRENT_LIST_DIR}/test_model_runner.cpp)
target_link_libraries(test_tensor_parallel PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_tensor_parallel DISCOVERY_TIMEOUT 60)

# The EAGLE-3 head's forward against speculators' Eagle3DraftModel (tools/make_eagle3_fixtures.py).
add_executable(test_eagle3_head ${CMAKE_CURRENT_LIST_DIR}/test_eagle3_head.cpp)
target_link_libraries(test_eagle3_head PRIVATE fp8lm_model fp8lm_cpu fp8lm_test_support)
gtest_discover_tests(test_eagle3_head DISCOVERY_TIMEOUT 60)
# Structured outputs through the engine: constrained requests batched == alone, in their language.
add_executable(test_engine_structured ${CMAKE_CURRENT_LIST_DIR}/test_engine_structured.cpp)
target_link_libraries(test_engine_structured PRIVATE fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_engine_structured DISCOVERY_TIMEOUT 60)
