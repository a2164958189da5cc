# ---- calibration: amax statistics of a model run over sample text ------------
# Included from src/CMakeLists.txt. Below the engine (KV scales at load) and the
# quantize writer (static scales). The KV-scale calibration text is compiled in,
# so a load-time calibration needs no file beside the binary.
file(READ ${CMAKE_CURRENT_LIST_DIR}/calibration_text.txt FP8LM_CALIBRATION_TEXT)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/calibration_text.txt)
configure_file(${CMAKE_CURRENT_LIST_DIR}/calibration_text.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/calibration_text.cpp @ONLY)

add_library(fp8lm_calibration STATIC
  ${CMAKE_CURRENT_LIST_DIR}/calibration.cpp
  ${CMAKE_CURRENT_BINARY_DIR}/calibration_text.cpp)
target_link_libraries(fp8lm_calibration PUBLIC fp8lm_model fp8lm_tokenizer)
