# The server's API layer (src/server: request parsing and checks, errors,
# response bodies, reasoning split, metrics) without HTTP, and the engine's
# per-token logprobs that the API reports.
add_executable(test_server_api ${CMAKE_CURRENT_LIST_DIR}/test_server_api.cpp ${CMAKE_CURRENT_LIST_DIR}/test_tool_calls.cpp)
target_link_libraries(test_server_api PRIVATE fp8lm_server_api fp8lm_runtime fp8lm_test_support)
gtest_discover_tests(test_server_api DISCOVERY_TIMEOUT 60)
