# ---- chat: Jinja chat templates rendered as transformers renders them --------
add_library(fp8lm_chat STATIC
  ${CMAKE_CURRENT_LIST_DIR}/value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lexer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parser.cpp
  ${CMAKE_CURRENT_LIST_DIR}/eval.cpp
  ${CMAKE_CURRENT_LIST_DIR}/builtins.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chat_template.cpp)
target_link_libraries(fp8lm_chat PUBLIC fp8lm_io)
