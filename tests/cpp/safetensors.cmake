# Tests of the safetensors layer (src/io/safetensors.cmake), against fixtures
# made by the reference implementation (tools/make_safetensors_fixtures.py).
add_executable(test_safetensors
  ${CMAKE_CURRENT_LIST_DIR}/test_safetensors_dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_safetensors_reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_safetensors_writer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_checkpoint_files.cpp)
target_link_libraries(test_safetensors PRIVATE fp8lm_io fp8lm_test_support)
gtest_discover_tests(test_safetensors DISCOVERY_TIMEOUT 60)
