# The persistent decode kernel (issue 41): a whole decode step as one launch (decode_program.h).
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/decode_kernel.cu
  ${CMAKE_CURRENT_LIST_DIR}/decode_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/weight_map.cpp)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/decode_kernel.cu PROPERTIES COMPILE_OPTIONS "-lineinfo")
