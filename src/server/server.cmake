# ---- server: `fp8lm serve`, an OpenAI-compatible HTTP server over the engine ----
# Included from src/CMakeLists.txt. fp8lm_server_api is the part without HTTP
# (request parsing and checks, response bodies, reasoning split, metrics),
# unit-tested on its own; fp8lm_server adds the HTTP transport (cpp-httplib under
# its own connection handling, http_transport) and the engine thread.
#
# cpp-httplib: Debian's libcpp-httplib-dev (a compiled library, found through
# pkg-config); else an upstream single-header httplib.h on the include path.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(CPP_HTTPLIB IMPORTED_TARGET cpp-httplib)
if(CPP_HTTPLIB_FOUND)
  set(FP8LM_HTTPLIB PkgConfig::CPP_HTTPLIB)
else()
  find_path(FP8LM_HTTPLIB_INCLUDE_DIR httplib.h)
  if(NOT FP8LM_HTTPLIB_INCLUDE_DIR)
    message(FATAL_ERROR "cpp-httplib not found: install Debian's libcpp-httplib-dev (scripts/build.sh does)")
  endif()
  add_library(fp8lm_httplib INTERFACE)
  target_include_directories(fp8lm_httplib SYSTEM INTERFACE ${FP8LM_HTTPLIB_INCLUDE_DIR})
  target_link_libraries(fp8lm_httplib INTERFACE Threads::Threads)
  set(FP8LM_HTTPLIB fp8lm_httplib)
endif()

add_library(fp8lm_server_api STATIC
  ${CMAKE_CURRENT_LIST_DIR}/api_error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/structured_request.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reasoning.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tool_calls.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/routes.cpp)
target_link_libraries(fp8lm_server_api PUBLIC fp8lm_engine nlohmann_json::nlohmann_json)

# The chat page (GET /): chat_page.html compiled in as a byte array (chat_page.cpp.in), so any
# character in it is safe and the binary needs no file beside it; editing the page re-runs this.
file(READ ${CMAKE_CURRENT_LIST_DIR}/chat_page.html FP8LM_CHAT_PAGE_HEX HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," FP8LM_CHAT_PAGE_BYTES "${FP8LM_CHAT_PAGE_HEX}")
string(REPEAT "0x..," 16 FP8LM_CHAT_PAGE_ROW)  # 16 bytes a line in the generated file
string(REGEX REPLACE "(${FP8LM_CHAT_PAGE_ROW})" "\\1\n" FP8LM_CHAT_PAGE_BYTES "${FP8LM_CHAT_PAGE_BYTES}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/chat_page.html)
configure_file(${CMAKE_CURRENT_LIST_DIR}/chat_page.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/chat_page.cpp @ONLY)

add_library(fp8lm_server STATIC ${CMAKE_CURRENT_LIST_DIR}/server.cpp ${CMAKE_CURRENT_LIST_DIR}/http_transport.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_info.cpp ${CMAKE_CURRENT_LIST_DIR}/grammar_pool.cpp ${CMAKE_CURRENT_BINARY_DIR}/chat_page.cpp)
target_link_libraries(fp8lm_server PUBLIC fp8lm_server_api fp8lm_runtime fp8lm_chat
  PRIVATE ${FP8LM_HTTPLIB} Threads::Threads)
