// The grouped CUTLASS FP8 GEMM's arguments (cutlass_fp8_grouped_gemm.h has the calls and the
// contract), apart so that the configurations' own files include them without the calls.
#pragma once

#include <cstdint>

namespace fp8lm::cuda {

enum class CutlassGroupedScales : uint8_t { kOuter, kBlock };

struct CutlassFp8GroupedGemmArgs {
  CutlassGroupedScales scales = CutlassGroupedScales::kOuter;
  int groups = 0;
  int64_t rows = 0, n = 0, k = 0;
  const int32_t* group_start = nullptr;   // device [groups + 1]: nondecreasing, 0 … rows
  const uint8_t* x = nullptr;             // [rows, k] E4M3
  const float* x_scale = nullptr;         // kOuter: [rows], or [1] (x_scale_per_row false); kBlock: [rows][cdiv(k, 128)]
  bool x_scale_per_row = true;
  const uint8_t* const* w = nullptr;      // device [groups]: each [n, k] E4M3
  const float* const* w_scale = nullptr;  // device [groups]: kOuter [n], or [1]; kBlock [cdiv(n, 128)][cdiv(k, 128)]
  bool w_scale_per_channel = true;
  void* y = nullptr;                      // [rows, n] BF16
};

}  // namespace fp8lm::cuda
