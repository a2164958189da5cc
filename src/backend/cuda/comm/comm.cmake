# Tensor parallelism's GPU ranks (nccl_group.h): NCCL opened at run time (nccl_library.h), built
# against the header of the pinned nvidia-nccl-cu13 that scripts/build.sh puts in .deps/nccl.
set(FP8LM_NCCL_INCLUDE_DIR "${CMAKE_SOURCE_DIR}/.deps/nccl/include" CACHE PATH
    "Folder holding nccl.h (scripts/build.sh fetches it from PyPI's nvidia-nccl-cu13)")
if(NOT EXISTS "${FP8LM_NCCL_INCLUDE_DIR}/nccl.h")
  message(FATAL_ERROR "nccl.h not found in FP8LM_NCCL_INCLUDE_DIR (${FP8LM_NCCL_INCLUDE_DIR}): "
                      "scripts/build.sh fetches it with the CUDA backend's other headers")
endif()
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/nccl_library.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_group.cpp)
target_include_directories(fp8lm_cuda SYSTEM PRIVATE ${FP8LM_NCCL_INCLUDE_DIR})
target_link_libraries(fp8lm_cuda PRIVATE ${CMAKE_DL_LIBS})
