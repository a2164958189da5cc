// The inner loops of the CPU linear layer, one table per instruction set
// (scalar, AVX2+FMA, AVX-512F), chosen at run time like the numerics kernels.
// Unlike those, these loops are compared with tolerances, not bytes: they may
// fuse multiply-adds and sum in lanes. Each table is deterministic on its own:
// the result for one output never depends on how many rows or threads share
// a call (every (row, column) pair has its own accumulator, reduced in a
// fixed order).
#pragma once

#include <cstdint>
#include <string_view>

#include "numerics/fp8_format.h"
#include "weights/element_type.h"

namespace fp8lm::cpu {

// out[i][j] = Σ_{k < len} x[i·ldx + k] · w[j·ldw + k], for i < MR, j < NR;
// out is row-major MR × NR.
using DotTileFn = void (*)(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len,
                           float* out);

inline constexpr int kMaxTile = 4;  // largest MR and NR any table provides

struct LinearKernels {
  std::string_view name;
  // out[i] = float(src[i]) for BF16 / F16 / F32 elements (never asked for FP8).
  void (*to_float)(const void* src, ElementType element, int64_t n, float* out);
  // out[i] = fp8_to_float(codes[i]) × scale (exactly the numerics dequantize for
  // finite codes; NaN codes are not expected in weights or saturated activations).
  void (*fp8_to_float)(const uint8_t* codes, int64_t n, Fp8Format format, float scale, float* out);
  // dot[MR-1][NR-1]; MR, NR ≤ max_tile.
  int max_mr;
  int max_nr;
  DotTileFn dot[kMaxTile][kMaxTile];
};

const LinearKernels& linear_kernels_scalar();
const LinearKernels* linear_kernels_avx2();    // nullptr if not built or not on this CPU
const LinearKernels* linear_kernels_avx512();  // nullptr if not built or not on this CPU

}  // namespace fp8lm::cpu

// Fills LinearKernels::dot with every MR × NR instantiation of a template `fn`.
#define FP8LM_LINEAR_DOT_ROW(fn, m) {fn<m, 1>, fn<m, 2>, fn<m, 3>, fn<m, 4>}
#define FP8LM_LINEAR_DOT_TABLE(fn)                                                 \
  {FP8LM_LINEAR_DOT_ROW(fn, 1), FP8LM_LINEAR_DOT_ROW(fn, 2), FP8LM_LINEAR_DOT_ROW(fn, 3), \
   FP8LM_LINEAR_DOT_ROW(fn, 4)}
