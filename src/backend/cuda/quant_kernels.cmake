# FP8 activation quantization (quant_kernels.h), bit-identical to the CPU
# reference.
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/quant_kernels.cu)
