// A/B switches of the CUDA backend read from the environment (FP8LM_CUDA_PDL,
// FP8LM_CUDA_FUSED_MERGE, FP8LM_CUDA_KV_PREFETCH, FP8LM_CUDA_DECODE_SPLIT, FP8LM_CUDA_CUTLASS,
// FP8LM_CUDA_MOE_GROUPED, FP8LM_CUDA_MOE_GEMM: docs/architecture.md): each is on unless its
// variable is "0", so that one binary measures a technique with and without it in the same
// device call.
#pragma once

#include <cstdlib>
#include <cstring>

namespace fp8lm::cuda {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace fp8lm::cuda
