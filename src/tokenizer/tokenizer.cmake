# The tokenizer (src/tokenizer): Hugging Face tokenizer.json in C++.
# PCRE2 reads the Unicode regexes of pre-tokenizers, utf8proc normalizes.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC IMPORTED_TARGET libutf8proc)
if(NOT UTF8PROC_FOUND)
  find_library(UTF8PROC_LIBRARY utf8proc REQUIRED)
  find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
  add_library(fp8lm_utf8proc INTERFACE)
  target_link_libraries(fp8lm_utf8proc INTERFACE ${UTF8PROC_LIBRARY})
  target_include_directories(fp8lm_utf8proc INTERFACE ${UTF8PROC_INCLUDE_DIR})
  set(FP8LM_UTF8PROC fp8lm_utf8proc)
else()
  set(FP8LM_UTF8PROC PkgConfig::UTF8PROC)
endif()

add_library(fp8lm_tokenizer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/utf8.cpp
  ${CMAKE_CURRENT_LIST_DIR}/json_util.cpp
  ${CMAKE_CURRENT_LIST_DIR}/regex.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pattern.cpp
  ${CMAKE_CURRENT_LIST_DIR}/byte_level.cpp
  ${CMAKE_CURRENT_LIST_DIR}/split_behavior.cpp
  ${CMAKE_CURRENT_LIST_DIR}/normalizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pre_tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/added_vocabulary.cpp
  ${CMAKE_CURRENT_LIST_DIR}/post_processor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decoder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/incremental_decoder.cpp)
target_include_directories(fp8lm_tokenizer PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(fp8lm_tokenizer PUBLIC fp8lm_io nlohmann_json::nlohmann_json
  PRIVATE PkgConfig::PCRE2 ${FP8LM_UTF8PROC})
