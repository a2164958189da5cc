# Structured outputs (src/structured): grammars over a model's vocabulary through xgrammar's C++
# core (cmake/Xgrammar.cmake), compiled and cached per spec, a token mask per step and sequence.
add_library(fp8lm_structured STATIC
  ${CMAKE_CURRENT_LIST_DIR}/grammar_vocabulary.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grammar_compiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grammar_matcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compile_worker.cpp)
target_include_directories(fp8lm_structured PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
# xgrammar's log hooks (library_warnings.cpp) go into the library that calls them; they include
# xgrammar's internal logging header, from its cpp/ folder. (A prebuilt fp8lm_xgrammar,
# FP8LM_XGRAMMAR_LIBRARY in cmake/Xgrammar.cmake, holds them already.)
if(NOT FP8LM_XGRAMMAR_LIBRARY)
  target_sources(fp8lm_xgrammar PRIVATE ${CMAKE_CURRENT_LIST_DIR}/library_warnings.cpp)
  target_include_directories(fp8lm_xgrammar PRIVATE "${FP8LM_XGRAMMAR_DIR}/cpp" ${CMAKE_CURRENT_SOURCE_DIR})
endif()
target_link_libraries(fp8lm_structured PUBLIC fp8lm_tokenizer fp8lm_common PRIVATE fp8lm_xgrammar nlohmann_json::nlohmann_json)
