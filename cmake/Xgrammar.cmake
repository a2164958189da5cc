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
file(GLOB FP8LM_XGRAMMAR_SOURCES CONFIGURE_DEPENDS
  "${FP8LM_XGRAMMAR_DIR}/cpp/*.cc" "${FP8LM_XGRAMMAR_DIR}/cpp/support/*.cc" "${FP8LM_XGRAMMAR_DIR}/cpp/converter_ext/*.cc")
add_library(fp8lm_xgrammar STATIC ${FP8LM_XGRAMMAR_SOURCES})
target_include_directories(fp8lm_xgrammar SYSTEM PUBLIC
  "${FP8LM_XGRAMMAR_DIR}/include" "${FP8LM_XGRAMMAR_DIR}/3rdparty/picojson" "${FP8LM_XGRAMMAR_DIR}/3rdparty/dlpack/include")
# Its log goes through fp8lm's hooks (src/structured/library_warnings.cpp): warnings about schema
# constraints it would drop become refusals; nothing is printed from inside a compilation.
target_compile_definitions(fp8lm_xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_LOG_CUSTOMIZE=1)
set_target_properties(fp8lm_xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
# -w: its warnings are not errors here. -O2 also in Debug builds (the sanitizer build): masks are
# computed every step of the tests that use them. Not instrumented by the sanitizers: its code is
# xgrammar's to check, and UBSan's no-recover mode would end our tests on its behaviour.
target_compile_options(fp8lm_xgrammar PRIVATE -w -O2 $<$<BOOL:${FP8LM_SANITIZE}>:-fno-sanitize=all>)
find_package(Threads REQUIRED)
target_link_libraries(fp8lm_xgrammar PUBLIC Threads::Threads)
