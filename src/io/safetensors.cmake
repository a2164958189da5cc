# The safetensors layer of fp8lm_io: header parsing, memory-mapped files,
# sharded checkpoints and the writer (included from src/CMakeLists.txt).
target_sources(fp8lm_io PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_header.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mapped_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_writer.cpp)
