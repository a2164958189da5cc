# xgrammar's C++ core, the library vLLM, SGLang and TensorRT-LLM constrain decoding with (JSON
# schemas, regexes, EBNF and structural tags compiled against a tokenizer's vocabulary, a token
# bitmask per step): fp8lm_xgrammar, used only by src/structured. Its sources come from the pinned
# PyPI sdist that scripts/build.sh unpacks into .deps/xgrammar. Its own CMakeLists builds the Python
# bindings by default and adds -Werror and LTO, so its C++ sources are compiled here, as C++17 (its
# standard), with our compiler and build type, its warnings silenced (they are not ours to fix).
set(FP8LM_XGRAMMAR_DIR "${PROJECT_SOURCE_DIR}/.deps/xgrammar" CACHE PATH "xgrammar's unpacked sdist")
if(NOT EXISTS "${FP8LM_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h")
  message(FATAL_ERROR "xgrammar's sources are not in ${FP8LM_XGRAMMAR_DIR}: scripts/build.sh fetches them")
endif()
# FP8LM_XGRAMMAR_LIBRARY: a libfp8lm_xgrammar.a that another build tree of this checkout built
# (scripts/test.sh's sanitizer build links the plain build's), used instead of compiling xgrammar
# again: xgrammar is never instrumented and always -O2, so the second compile would build the same
# code — 3 CPU-minutes of CI. That library holds src/structured/library_warnings.cpp's hooks too.
set(FP8LM_XGRAMMAR_LIBRARY "" CACHE FILEPATH "libfp8lm_xgrammar.a from another build tree, instead of compiling it")
set(fp8lm_xgrammar_includes
  "${FP8LM_XGRAMMAR_DIR}/include" "${FP8LM_XGRAMMAR_DIR}/3rdparty/picojson" "${FP8LM_XGRAMMAR_DIR}/3rdparty/dlpack/include")
find_package(Threads REQUIRED)
if(FP8LM_XGRAMMAR_LIBRARY)
  if(NOT EXISTS "${FP8LM_XGRAMMAR_LIBRARY}")
    message(FATAL_ERROR "FP8LM_XGRAMMAR_LIBRARY: ${FP8LM_XGRAMMAR_LIBRARY} does not exist")
  endif()
  add_library(fp8lm_xgrammar STATIC IMPORTED GLOBAL)
  set_target_properties(fp8lm_xgrammar PROPERTIES IMPORTED_LOCATION "${FP8LM_XGRAMMAR_LIBRARY}")
  target_include_directories(fp8lm_xgrammar SYSTEM INTERFACE ${fp8lm_xgrammar_includes})
  target_compile_definitions(fp8lm_xgrammar INTERFACE XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_LOG_CUSTOMIZE=1)
  target_link_libraries(fp8lm_xgrammar INTERFACE Threads::Threads)
  return()
endif()
file(GLOB FP8LM_XGRAMMAR_SOURCES CONFIGURE_DEPENDS
  "${FP8LM_XGRAMMAR_DIR}/cpp/*.cc" "${FP8LM_XGRAMMAR_DIR}/cpp/support/*.cc" "${FP8LM_XGRAMMAR_DIR}/cpp/converter_ext/*.cc")
add_library(fp8lm_xgrammar STATIC ${FP8LM_XGRAMMAR_SOURCES})
target_include_directories(fp8lm_xgrammar SYSTEM PUBLIC ${fp8lm_xgrammar_includes})
# Its log goes through fp8lm's hooks (src/structured/library_warnings.cpp): warnings about schema
# constraints it would drop become refusals; nothing is printed from inside a compilation.
target_compile_definitions(fp8lm_xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_LOG_CUSTOMIZE=1)
set_target_properties(fp8lm_xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
# -w: its warnings are not errors here. -O2 also in Debug builds (the sanitizer build): masks are
# computed every step of the tests that use them. Not instrumented by the sanitizers: its code is
# xgrammar's to check, and UBSan's no-recover mode would end our tests on its behaviour.
target_compile_options(fp8lm_xgrammar PRIVATE -w -O2 $<$<BOOL:${FP8LM_SANITIZE}>:-fno-sanitize=all>)
target_link_libraries(fp8lm_xgrammar PUBLIC Threads::Threads)
