# The charts and the HTML report of `fp8lm bench sweep` / `bench report`
# (src/cli/svg_chart, src/cli/bench_report): ticks, scales, points and bars read
# back from the SVG, escaping, the roofline, results files read and refused.
add_executable(test_bench_report ${CMAKE_CURRENT_LIST_DIR}/test_bench_report.cpp)
target_link_libraries(test_bench_report PRIVATE fp8lm_report fp8lm_test_support)
gtest_discover_tests(test_bench_report DISCOVERY_TIMEOUT 60)
# GCC 12's false -Wmaybe-uninitialized inside libstdc++'s <regex> under -fsanitize=address (as
# src/io/config.cmake says for module_pattern.cpp): the test reads the SVG back with std::regex.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/test_bench_report.cpp PROPERTIES COMPILE_OPTIONS
  "-Wno-maybe-uninitialized")
