// Small kernels only the CUDA ops need around the GEMMs (cuda_ops.cpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemv/fp8_gemv.h"

namespace fp8lm::cuda {

// w_bf16[n, k] = bf16(float(code) × scale) in the weight's scale grid (tensor, channel
// or 128×128 blocks): the W8A16 layers' weights for the BF16 GEMM at prefill sizes.
void dequantize_weight_bf16(const uint8_t* codes, const float* scales, WeightScaleLayout layout, int64_t n, int64_t k,
                            __nv_bfloat16* out, cudaStream_t stream);

// out[0 .. m) = *scale: a per-tensor activation scale as the per-row vector
// cuBLASLt's outer-vector mode reads (next to per-channel weight scales).
void broadcast_scale(const float* scale, int64_t m, float* out, cudaStream_t stream);

// Splits each row of x [rows, Σ widths] into up to 4 outputs [rows, widths[i]]
// (a fused projection's output into its parts). One launch.
struct ColumnSplit {
  int count = 0;
  __nv_bfloat16* out[4] = {};
  int64_t width[4] = {};
};
void split_columns(const __nv_bfloat16* x, int64_t rows, const ColumnSplit& split, cudaStream_t stream);

}  // namespace fp8lm::cuda
