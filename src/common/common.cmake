# common (src/common): the error type, the thread pool and the MoE decode-bytes rule every layer may use.
find_package(Threads REQUIRED)
add_library(fp8lm_common STATIC ${CMAKE_CURRENT_LIST_DIR}/thread_pool.cpp)
target_include_directories(fp8lm_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(fp8lm_common PUBLIC Threads::Threads)
