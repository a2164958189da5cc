// A/B switches of the CUDA backend read from the environment (FP8LM_CUDA_PDL,
// FP8LM_CUDA_FUSED_MERGE, FP8LM_CUDA_KV_PREFETCH, FP8LM_CUDA_DECODE_SPLIT: docs/architecture.md):
// each is on unless its variable is "0", so that one binary measures a technique with and without
// it in the same device call. Also the readers of the numeric and named tuning knobs
// (env_whole_number, env_choice), which refuse any other value by name.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include "common/error.h"

namespace fp8lm::cuda {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// A technique built but not yet measured: off unless its variable is "1".
inline bool env_opt_in(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// A tuning knob that is a whole number in [lo, hi] (hi = the int64 maximum: no upper bound):
// `fallback` where the variable is unset or empty; any other value is refused by name
// ("cuda <who>: NAME=value is not a whole number in [lo, hi]" / "... >= lo").
inline int64_t env_whole_number(const char* name, int64_t lo, int64_t hi, int64_t fallback, const char* who) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(e, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    const std::string range = hi == std::numeric_limits<int64_t>::max()
                                  ? ">= " + std::to_string(lo)
                                  : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    throw Error(std::string("cuda ") + who + ": " + name + "=" + e + " is not a whole number " + range);
  }
  return int64_t(x);
}

// A tuning knob with a few named values: the one the variable holds, `fallback` where it is
// unset or empty; any other value is refused by name ("cuda <who>: NAME=value is not a or b").
inline std::string env_choice(const char* name, std::initializer_list<const char*> values, const char* fallback,
                              const char* who) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  std::string listed;
  for (const char* v : values) {
    if (std::strcmp(e, v) == 0) return e;
    listed += (listed.empty() ? "" : " or ") + std::string(v);
  }
  throw Error(std::string("cuda ") + who + ": " + name + "=" + e + " is not " + listed);
}

}  // namespace fp8lm::cuda
