// The CUTLASS FP8 GEMM's arguments and configurations (cutlass_fp8_gemm.h has the calls), apart
// so that the configurations' own files (cutlass_fp8_gemm_configs.h) include them without the
// calls that dispatch to them.
#pragma once

#include <cstdint>

namespace fp8lm::cuda {

enum class CutlassFp8Config {
  kCooperative128x128,  // 128 × 128 × 128 tiles, clusters of 1 × 2, cooperative, persistent
  kStreamK128x128,      // the same with stream-K: K split over CTAs when the tiles are too few
  kPingpong64x128,      // 64 × 128 × 128 tiles, ping-pong warp groups, persistent (small m)
};
inline constexpr CutlassFp8Config kCutlassFp8Configs[] = {
    CutlassFp8Config::kCooperative128x128, CutlassFp8Config::kStreamK128x128, CutlassFp8Config::kPingpong64x128};

// A configuration's short name: what FP8LM_CUDA_CUTLASS takes and the linear plan prints.
constexpr const char* cutlass_fp8_config_switch_name(CutlassFp8Config c) {
  switch (c) {
    case CutlassFp8Config::kCooperative128x128: return "coop";
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
  CutlassFp8Config config = CutlassFp8Config::kCooperative128x128;
};

// The block-scaled GEMM (DeepSeek-V3's and `--quantization fp8:block`'s scheme): x in 1 × 128
// groups, w in 128 × 128 blocks. Both scale grids are MN-major, as CUTLASS's Hopper blockwise
// mainloop reads them: x_scale [cdiv(k, 128)][m] (cuBLASLt's layout too: group_scales_to_cublas
// makes it from fp8lm's [m][cdiv(k, 128)]); w_scale [cdiv(k, 128)][cdiv(n, 128)] (the weight's
// [n-block][k-block] grid transposed).
struct CutlassFp8BlockGemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* x = nullptr;        // [m, k] E4M3
  const float* x_scale = nullptr;    // [cdiv(k, 128)][m]
  const uint8_t* w = nullptr;        // [n, k] E4M3
  const float* w_scale = nullptr;    // [cdiv(k, 128)][cdiv(n, 128)]
  void* y = nullptr;                 // [m, n] BF16
};

}  // namespace fp8lm::cuda
