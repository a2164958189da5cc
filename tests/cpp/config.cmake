# Tests of config.json, quantization_config, generation_config.json, load-override and EAGLE-3
# head config parsing.
add_executable(test_config
  ${CMAKE_CURRENT_LIST_DIR}/test_model_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_quant_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_load_overrides.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_json_value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_generation_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_eagle3_config.cpp)
target_link_libraries(test_config PRIVATE fp8lm_io fp8lm_test_support)
gtest_discover_tests(test_config DISCOVERY_TIMEOUT 60)
