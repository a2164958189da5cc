# The engine (src/engine): sampling, stop conditions, KV-cache block bookkeeping.
add_library(fp8lm_engine STATIC
  ${CMAKE_CURRENT_LIST_DIR}/sampler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop_checker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/speculative.cpp
  ${CMAKE_CURRENT_LIST_DIR}/block_allocator.cpp)
target_include_directories(fp8lm_engine PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
# fp8lm_backend: the row math of sampling (backend/sampling.h), shared with the backends' sample_rows.
target_link_libraries(fp8lm_engine PUBLIC fp8lm_io fp8lm_backend)

# The runtime, the generation loop and the batched engine (continuous batching):
# model + tokenizer + sampler + KV blocks. A second target of this folder so
# that what needs only sampling and stops (the server's API layer, its fuzzer)
# does not link the model and every backend.
add_library(fp8lm_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/generate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/draft_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eagle3_drafter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sequence_output.cpp
  ${CMAKE_CURRENT_LIST_DIR}/request_grammar.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine.cpp)
# The backend factory brings every backend this build has (--device cuda with CUDA).
target_link_libraries(fp8lm_runtime PUBLIC fp8lm_engine fp8lm_model fp8lm_tokenizer fp8lm_calibration fp8lm_backend_factory
  fp8lm_structured)
