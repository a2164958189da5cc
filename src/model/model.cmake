# ---- loader + model: checkpoint → weights on a backend → the forward pass ------
# Included from src/CMakeLists.txt.
add_library(fp8lm_model STATIC
  ${CMAKE_CURRENT_LIST_DIR}/llama_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../loader/host_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../loader/dummy_weights.cpp)
target_link_libraries(fp8lm_model PUBLIC fp8lm_cpu fp8lm_io fp8lm_weights)

# The runtime, the generation loop and the batched engine (continuous batching):
# model + tokenizer + sampler + KV blocks.
add_library(fp8lm_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/../engine/runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../engine/generate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../engine/sequence_output.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../engine/scheduler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../engine/engine.cpp)
# The backend factory brings every backend this build has (--device cuda with CUDA).
target_link_libraries(fp8lm_runtime PUBLIC fp8lm_model fp8lm_engine fp8lm_tokenizer fp8lm_calibration fp8lm_backend_factory)
