#include "backend/cuda/common/check.h"

#include "common/error.h"

namespace fp8lm::cuda {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ") in " + expr + " at " + file + ":" +
              std::to_string(line));
}

}  // namespace fp8lm::cuda
