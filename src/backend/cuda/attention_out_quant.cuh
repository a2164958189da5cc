// The device half of attention_out_quant.h: a writer's arrival on the rows it finished, and the
// warp that quantizes a completed row. Included by the attention kernels.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_out_quant.h"
#include "backend/cuda/row_quant_device.cuh"

namespace fp8lm::cuda {

// Eight BF16 values of a row other CTAs wrote, through L2 (__ldcg: this SM's L1 may hold none
// of it, but never a stale copy then).
__device__ __forceinline__ void load_bf16x8_l2(const __nv_bfloat16* src, float (&f)[8]) {
  const uint4 u = __ldcg(reinterpret_cast<const uint4*>(src));
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(w[j] << 16);
    f[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
  }
}

// One warp quantizes output row `row`: a static scale; or per token, the row's amax (fmaxf of
// |x|, as the row kernels' cells) then the codes, two passes over the row from L2; or per group,
// each cell's amax over the lanes that share it, one pass.
__device__ __forceinline__ void quantize_out_row_warp(const AttentionOutQuant& q, const __nv_bfloat16* out,
                                                      int64_t row, int lane) {
  const RowParams& p = q.p;
  const __nv_bfloat16* src = out + row * p.k;
  uint8_t* dst = p.codes + row * p.k;
  const int nv = p.k / 8;
  if (p.mode == RowQuantMode::kStatic || p.ngroups == 1) {
    float s;
    if (p.mode == RowQuantMode::kStatic) {
      s = *p.static_scale;
    } else {
      float m = 0.0f;
      for (int v = lane; v < nv; v += 32) {
        float f[8];
        load_bf16x8_l2(src + 8 * v, f);
#pragma unroll
        for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(f[j]));  // fmaxf skips NaN
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
      s = scale_from_amax(m, p);
      if (lane == 0) p.scales[row] = s;
    }
    for (int v = lane; v < nv; v += 32) {
      float f[8];
      load_bf16x8_l2(src + 8 * v, f);
      *reinterpret_cast<uint2*>(dst + 8 * v) = quantize8(f, s, p.format);
    }
    return;
  }
  const int lanes = p.group / 8;  // lanes whose vectors share a cell (attention_out_quant_covers)
  for (int v0 = 0; v0 < nv; v0 += 32) {
    const int v = v0 + lane;
    float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float m = 0.0f;
    if (v < nv) {
      load_bf16x8_l2(src + 8 * v, f);
#pragma unroll
      for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(f[j]));
    }
    for (int o = lanes / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if (v < nv) {  // cells lie on lane-group boundaries: a cell is wholly inside the row or outside
      const float s = scale_from_amax(m, p);
      if ((lane & (lanes - 1)) == 0) p.scales[row * p.ngroups + (8 * v) / p.group] = s;
      *reinterpret_cast<uint2*>(dst + 8 * v) = quantize8(f, s, p.format);
    }
  }
}

// Called by all 32 lanes of a warp once each lane's stores of the output rows it wrote are done:
// lane i arrives on row[j] with heads[j] heads written (0: no arrival). The warp quantizes every
// row whose count its arrivals complete, and zeroes their counters. Stores made by other warps
// of the CTA need __threadfence + __syncthreads before the call (the CTA-wide writers do that).
template <int N>
__device__ __forceinline__ void out_rows_done_warp(const AttentionOutQuant& q, const __nv_bfloat16* out,
                                                   const int64_t (&row)[N], const int (&heads)[N], int lane) {
  __threadfence();  // this lane's stores before its arrivals, and before the other lanes' (syncwarp)
  __syncwarp();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    bool done = false;
    if (heads[i] > 0)
      done = atomicAdd(q.counters + row[i], unsigned(heads[i])) + unsigned(heads[i]) == unsigned(q.heads);
    unsigned mask = __ballot_sync(0xFFFFFFFFu, done);
    if (mask != 0) __threadfence();  // the other writers' stores, published before their arrivals
    while (mask != 0) {
      const int src = __ffs(int(mask)) - 1;
      mask &= mask - 1;
      const int64_t r = __shfl_sync(0xFFFFFFFFu, row[i], src);
      quantize_out_row_warp(q, out, r, lane);
      if (lane == 0) q.counters[r] = 0;
    }
  }
}

// One arrival from lane 0 of a warp (the other lanes' stores done too).
__device__ __forceinline__ void out_row_done_warp(const AttentionOutQuant& q, const __nv_bfloat16* out, int64_t row,
                                                  int heads, int lane) {
  const int64_t rows[1] = {row};
  const int h[1] = {lane == 0 ? heads : 0};
  out_rows_done_warp<1>(q, out, rows, h, lane);
}

}  // namespace fp8lm::cuda
