# ---- eval: perplexity and KL divergence against a base model -------------------
# Included from src/CMakeLists.txt; paths are relative to this file.
add_library(fp8lm_eval STATIC
  ${CMAKE_CURRENT_LIST_DIR}/perplexity.cpp)
target_link_libraries(fp8lm_eval PUBLIC fp8lm_runtime)
