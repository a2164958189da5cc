# ---- quantize: the compressed-tensors checkpoint writer -----------------------
# Included from src/CMakeLists.txt. Static scales come from calibration
# (src/calibration/calibration.cmake).
add_library(fp8lm_quantize STATIC
  ${CMAKE_CURRENT_LIST_DIR}/compressed_tensors_writer.cpp)
target_link_libraries(fp8lm_quantize PUBLIC fp8lm_calibration fp8lm_model fp8lm_tokenizer)
