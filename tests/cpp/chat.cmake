# Chat templates: interpreter units and every real template against transformers.
add_executable(test_chat
  ${CMAKE_CURRENT_LIST_DIR}/test_chat_interpreter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_chat_templates.cpp)
target_link_libraries(test_chat PRIVATE fp8lm_chat fp8lm_test_support)
gtest_discover_tests(test_chat DISCOVERY_TIMEOUT 60)
