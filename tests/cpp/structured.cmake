# Structured outputs (src/structured): token masks against xgrammar's Python package
# (tools/make_grammar_fixtures.py), the compile cache, refusals.
# The framing between the server and its grammar worker processes (test_compile_worker.cpp).
add_executable(test_structured ${CMAKE_CURRENT_LIST_DIR}/test_structured.cpp ${CMAKE_CURRENT_LIST_DIR}/test_compile_worker.cpp)
target_link_libraries(test_structured PRIVATE fp8lm_structured fp8lm_server_api fp8lm_test_support)
gtest_discover_tests(test_structured DISCOVERY_TIMEOUT 60)
