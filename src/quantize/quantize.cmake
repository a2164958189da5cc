# ---- quantize: calibration and the compressed-tensors checkpoint writer -------
# Included from src/CMakeLists.txt. The KV-scale calibration text is compiled in,
# so a load-time calibration needs no file beside the binary.
file(READ ${CMAKE_CURRENT_LIST_DIR}/calibration_text.txt FP8LM_CALIBRATION_TEXT)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/calibration_text.txt)
configure_file(${CMAKE_CURRENT_LIST_DIR}/calibration_text.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/calibration_text.cpp @ONLY)

add_library(fp8lm_quantize STATIC
  ${CMAKE_CURRENT_LIST_DIR}/calibration.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compressed_tensors_writer.cpp
  ${CMAKE_CURRENT_BINARY_DIR}/calibration_text.cpp)
target_link_libraries(fp8lm_quantize PUBLIC fp8lm_model fp8lm_tokenizer)
