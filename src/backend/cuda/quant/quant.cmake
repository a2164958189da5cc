# FP8 activation quantization (quant_kernels.h), bit-identical to the CPU reference, and the
# array casts (fp8_cast.h). Adds to fp8lm_cuda.
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/quant_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/fp8_cast.cu)
