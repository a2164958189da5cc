// CUDA error checking with context: every failing runtime call becomes an
// fp8lm::Error naming the call, the file and line, and CUDA's own message.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace fp8lm::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line);

}  // namespace fp8lm::cuda

#define FP8LM_CUDA_CHECK(expr)                                                       \
  do {                                                                               \
    const cudaError_t fp8lm_status_ = (expr);                                        \
    if (fp8lm_status_ != cudaSuccess)                                                \
      ::fp8lm::cuda::throw_cuda_error(fp8lm_status_, #expr, __FILE__, __LINE__);     \
  } while (0)
