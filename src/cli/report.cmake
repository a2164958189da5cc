# The charts and the HTML report of `fp8lm bench sweep` / `bench report`
# (src/cli): no model code, only JSON in and SVG/HTML out, so the unit tests
# (tests/cpp/report.cmake) link it without the engine.
add_library(fp8lm_report STATIC ${CMAKE_CURRENT_LIST_DIR}/svg_chart.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_report.cpp)
target_link_libraries(fp8lm_report PUBLIC fp8lm_common nlohmann_json::nlohmann_json)
