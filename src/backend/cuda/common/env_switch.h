// The CUDA backend's A/B switches, read from the environment (the table in docs/architecture.md,
// "The CUDA backend's environment switches": FP8LM_CUDA_PDL, FP8LM_CUDA_CUTLASS,
// FP8LM_CUDA_DECODE_SPLIT, FP8LM_CUDA_FUSED_MERGE, FP8LM_CUDA_KV_PREFETCH, FP8LM_CUDA_MOE_GROUPED,
// FP8LM_CUDA_MOE_GEMM). Each turns off a technique that is on by default, so that one binary
// measures it with and without in the same device call: unset, empty or "1" is on, "0" off, and
// any other value is refused by name (a typo must not measure the wrong thing).
#pragma once

#include <cstdlib>
#include <string>

#include "common/error.h"

namespace fp8lm::cuda {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0' || std::string(v) == "1") return true;
  if (std::string(v) == "0") return false;
  throw Error(std::string("cuda: ") + name + "=" + v + " is not 0 or 1 (an A/B switch: unset or 1 is on, 0 off)");
}

}  // namespace fp8lm::cuda
