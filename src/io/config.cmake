# config.json -> ModelConfig, quantization_config -> per-layer schemes, load overrides,
# generation_config.json -> default sampling parameters.
target_sources(fp8lm_io PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/generation_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_config_json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eagle3_config_json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/module_pattern.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_quantization.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quant_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quant_hf_formats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quant_compressed_tensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/load_overrides.cpp)
# GCC 12 reports a false -Wmaybe-uninitialized inside libstdc++'s <regex>
# (std::function in its NFA states) under -fsanitize=address; this one file only.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/module_pattern.cpp PROPERTIES COMPILE_OPTIONS
  "-Wno-maybe-uninitialized")
