// Quantizing rows that a kernel holds (quantize_device.cuh's element rules, row by row): the
// row kernels of quant_kernels.cu and the kernels that quantize the rows they produce (the
// RMSNorm of model_kernels.cu), so that a fused producer writes the codes and scales the
// quantization kernel would, bit for bit. RowParams (row_quant_params.h) come from
// row_quant_params (quant_kernels.h), which checks them.
//
// Per row, every thread of the block calls, in order: zero the cells (ngroups unsigned in
// shared memory), __syncthreads, amax_vector over each of its vectors (all lanes: it shuffles),
// __syncthreads, make_scales, then store_codes for its vectors inside the row.
#pragma once

#include <cstdint>

#include "backend/cuda/quant/row_quant_params.h"
#include "backend/cuda/quant/quantize_device.cuh"
#include "backend/cuda/quant/scale_rule.h"
#include "numerics/fp8_format.h"

namespace fp8lm::cuda {

// ---- element helpers -------------------------------------------------------------

// numerics/quantize.cpp's scale_from_amax for float32 arithmetic.
__device__ __forceinline__ float scale_from_amax(float amax, const RowParams& p) {
  return scale_from_amax(amax, Fp8ScaleRule{p.fmax, p.amax_floor, p.scale_floor, p.scale_cap});
}

// Adds a vector's |v| to the amax of its cell(s). Called by every lane of the
// warp (the pre-reduction shuffles); elements at or beyond k are left out.
template <bool kVec>
__device__ __forceinline__ void amax_vector(const float (&v)[8], int e0, const RowParams& p,
                                            unsigned* cells) {
  const int n = p.k - e0;
  if (p.seg_lanes > 0) {
    float m = 0.0f;
    if (kVec && n > 0) {  // k % 8 == 0: the whole vector is in the row
#pragma unroll
      for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));  // fmaxf skips NaN
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (j < n) m = fmaxf(m, fabsf(v[j]));
    }
    for (int o = p.seg_lanes / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if (n > 0 && (threadIdx.x & unsigned(p.seg_lanes - 1)) == 0)
      atomicMax(&cells[p.ngroups == 1 ? 0 : e0 / p.group], __float_as_uint(m));
  } else {
    int cell = -1;
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= n) break;
      const int c = (e0 + j) / p.group;
      if (c != cell) {
        if (cell >= 0) atomicMax(&cells[cell], __float_as_uint(m));
        cell = c;
        m = 0.0f;
      }
      m = fmaxf(m, fabsf(v[j]));
    }
    if (cell >= 0) atomicMax(&cells[cell], __float_as_uint(m));
  }
}

template <bool kVec>
__device__ __forceinline__ void store_codes(const float (&v)[8], int64_t row, int e0, const RowParams& p,
                                            const unsigned* cells, float s0) {
  const int n = p.k - e0;
  uint2 w;
  if (p.ngroups == 1 || p.group % 8 == 0) {
    w = quantize8(v, p.ngroups == 1 ? s0 : __uint_as_float(cells[e0 / p.group]), p.format);
  } else {  // cells narrower than or unaligned with the vector
    uint8_t c[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      c[j] = j < n ? quantize1(v[j], __uint_as_float(cells[(e0 + j) / p.group]), p.format) : 0;
    w.x = uint32_t(c[0]) | (uint32_t(c[1]) << 8) | (uint32_t(c[2]) << 16) | (uint32_t(c[3]) << 24);
    w.y = uint32_t(c[4]) | (uint32_t(c[5]) << 8) | (uint32_t(c[6]) << 16) | (uint32_t(c[7]) << 24);
  }
  uint8_t* out = p.codes + row * p.k + e0;
  if constexpr (kVec) {
    *reinterpret_cast<uint2*>(out) = w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < n) out[j] = static_cast<uint8_t>((j < 4 ? w.x : w.y) >> (8 * (j % 4)));
  }
}

// Between the amax pass and the stores: per-tensor pass 1 ends (false), else
// the cells turn into scales; returns the row's single scale for ngroups == 1.
__device__ __forceinline__ bool make_scales(int64_t row, const RowParams& p, unsigned* cells, float& s0) {
  if (p.mode == RowQuantMode::kAmax) {
    if (threadIdx.x == 0) atomicMax(p.amax_out, cells[0]);
    return false;
  }
  if (p.mode == RowQuantMode::kStatic) {
    s0 = *p.static_scale;
    return true;
  }
  for (int c = threadIdx.x; c < p.ngroups; c += blockDim.x) {
    const float s = scale_from_amax(__uint_as_float(cells[c]), p);
    cells[c] = __float_as_uint(s);
    p.scales[row * p.ngroups + c] = s;
  }
  __syncthreads();
  s0 = p.ngroups > 0 ? __uint_as_float(cells[0]) : 0.0f;  // no cells: k = 0, nothing to store
  return true;
}

}  // namespace fp8lm::cuda
