// The CUTLASS FP8 GEMM's arguments and configurations (cutlass_fp8_gemm.h has the calls), apart
// so that the configurations' own files (cutlass_fp8_gemm_configs.h) include them without the
// calls that dispatch to them.
#pragma once

#include <cstdint>

namespace fp8lm::cuda {

// The two that linear_plan.cpp's kCutlassMeasured dispatches.
enum class CutlassFp8Config {
  kStreamK128x128,  // 128 × 128 × 128 tiles, clusters of 1 × 2, cooperative, stream-K: K split
                    // over CTAs when the tiles are too few
  kPingpong64x128,  // 64 × 128 × 128 tiles, ping-pong warp groups, persistent (small m)
};
inline constexpr CutlassFp8Config kCutlassFp8Configs[] = {CutlassFp8Config::kStreamK128x128,
                                                          CutlassFp8Config::kPingpong64x128};

// A configuration's short name, as the linear plan prints it.
constexpr const char* cutlass_fp8_config_short_name(CutlassFp8Config c) {
  switch (c) {
    case CutlassFp8Config::kStreamK128x128: return "stream-k";
    case CutlassFp8Config::kPingpong64x128: return "ping-pong";
  }
  return "?";
}

struct CutlassFp8GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* x = nullptr;        // [m, k] E4M3
  const float* x_scale = nullptr;    // [m]
  const uint8_t* w = nullptr;        // [n, k] E4M3
  const float* w_scale = nullptr;    // [n]
  void* y = nullptr;                 // [m, n] BF16
  CutlassFp8Config config = CutlassFp8Config::kStreamK128x128;  // every caller names its own
};

}  // namespace fp8lm::cuda
