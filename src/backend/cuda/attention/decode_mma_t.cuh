// The pair decode kernel's tile steps (paged_attention_decode_pairs.cu): the tensor-core decode
// tiles transposed, for a warp of at most 8 packed rows (one new token of a GQA group of ≤ 8
// query heads: every pure decode step of Llama-3.1-8B): the keys and head dimensions are the
// MMAs' M, the rows their N — S^T = K·Q^T and O^T = V^T·P^T with m16n8k16 — instead of 16-row
// tiles of which a group of 4 fills a quarter. Per 16 keys a warp issues half the MMAs, computes
// a quarter as many exponentials per lane, and keeps half the accumulators (O^T: HD / 16 tiles
// of 4 floats), so four CTAs an SM fit without spills.
//
// Fragments (lane = 4g + q): S^T c0, c1 = (key g, rows 2q, 2q + 1), c2, c3 = (key g + 8, rows
// 2q, 2q + 1). Q^T is the B operand in the dimension order of scores_fp8 (dims 16c + 4q .. + 3 as
// k indices 2q, 2q + 1, 2q + 8, 2q + 9; the dot product does not depend on the order). P^T
// comes from S^T's layout by one movmatrix.trans per 8 keys. O^T tile d holds, for row 2q + i,
// dimension 16d + 2g in o[d][i] and 16d + 2g + 1 in o[d][2 + i]. FP8 codes only (the FP16 MMAs
// of attention_mma.cuh's FP8 steps, the same swizzled shared-memory tiles).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/attention/attention_mma.cuh"

namespace fp8lm::cuda::attention_detail {

// The sum over the 8 lanes of a fragment row group (lanes q, q + 4, …, q + 28): a row's total
// in the transposed layout, where a lane's values are its rows' sums over its keys g, g + 8.
__device__ __forceinline__ float key_lanes_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 4);
  x += __shfl_xor_sync(kFullMask, x, 8);
  return x + __shfl_xor_sync(kFullMask, x, 16);
}

__device__ __forceinline__ float key_lanes_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 4));
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 8));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 16));
}

// An 8×8 matrix of 16-bit values transposed across the warp (lane 4g + q holds row g, columns
// 2q, 2q + 1; afterwards the same of the transpose).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Q^T's B fragments in FP16 (qs: the CTA's BF16 rows in shared memory, kStride elements apart):
// lane (g, q) holds row g, dimensions 16c + 4q .. + 3 of k-step c (b0 the first two, b1 the
// last two), times 2^e_g with e_g putting row g's largest |q| in [2^14, 2^15). scale_r[i] =
// score_scale · 2^-e of row 2q + i, which the lane's scores belong to.
template <int HD, int kStride>
__device__ __forceinline__ void fp8_qt_fragments(const unsigned char* qs, int lane, float score_scale,
                                                 uint32_t (&qf)[HD / 16][2], float (&scale_r)[2]) {
  const int g = lane >> 2, q4 = (lane & 3) * 4;
  float x[HD / 16][4];
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < HD / 16; ++c) {
    load_bf16x4(qs + (g * kStride + 16 * c + q4) * 2, x[c]);
    amax = fmaxf(amax, abs_max4(x[c]));
  }
  const Fp16RowScale rs = fp16_row_scale(quad_max(amax));  // row g's, over the quad holding it
  const float up = rs.up;
  const float row_scale = score_scale * rs.down;
#pragma unroll
  for (int i = 0; i < 2; ++i) scale_r[i] = __shfl_sync(kFullMask, row_scale, (2 * (lane & 3) + i) * 4);
#pragma unroll
  for (int c = 0; c < HD / 16; ++c) {
    const __half2 lo = __floats2half2_rn(x[c][0] * up, x[c][1] * up);
    const __half2 hi = __floats2half2_rn(x[c][2] * up, x[c][3] * up);
    memcpy(&qf[c][0], &lo, 4);
    memcpy(&qf[c][1], &hi, 4);
  }
}

// S^T over 16 FP8 keys (kb: codes, rows of HD bytes in fp8_piece order): two accumulator chains
// (even and odd k-steps) so that consecutive MMAs do not wait on each other, added at the end.
template <int HD, KvElement E>
__device__ __forceinline__ void scores_fp8_t(const unsigned char* kb, const uint32_t (&qf)[HD / 16][2], int lane,
                                             float (&s)[4]) {
  float t[2][4] = {};
#pragma unroll
  for (int c = 0; c < HD / 16; c += 2) {
    uint32_t r[4];
    ldmatrix_x4(r, fp8_x4_addr<HD>(kb, 0, c, lane));
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // k-step c + j: r[2j] keys 0–7, r[2j + 1] keys 8–15
      const uint32_t a[4] = {fp8x2_to_half2<E>(r[2 * j]), fp8x2_to_half2<E>(r[2 * j + 1]),
                             fp8x2_to_half2<E>(r[2 * j] >> 16), fp8x2_to_half2<E>(r[2 * j + 1] >> 16)};
      mma_f16(t[j], a, qf[c + j][0], qf[c + j][1]);
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] = t[0][e] + t[1][e];
}

// The online softmax of 16 keys in the transposed layout (as softmax_tile: scaled, masked unless
// full, the state moved to the new maxima, P rounded to FP16 and summed as rounded; o rescaled
// only when some row's maximum moved). pb: P^T's B fragments for pv_fp8_t.
template <int HD>
__device__ __forceinline__ void softmax_tile_t(float (&s)[4], const float (&scale_r)[2], bool full, int64_t jbase,
                                               const int64_t (&lo_r)[2], const int64_t (&pos_r)[2], int lane,
                                               float (&m_r)[2], float (&l_r)[2], float (&o)[HD / 16][4],
                                               uint32_t (&pb)[2]) {
  const int g = lane >> 2;
  float m_use[2], alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // keys g, g + 8
      float& x = s[2 * h + i];
      x *= scale_r[i];
      if (!full) {
        const int64_t j = jbase + g + 8 * h;
        if (j < lo_r[i] || j > pos_r[i]) x = -INFINITY;
      }
    }
    alpha[i] = move_row_max(key_lanes_max(fmaxf(s[i], s[2 + i])), m_r[i], l_r[i], m_use[i]);
  }
  if (__any_sync(kFullMask, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int d = 0; d < HD / 16; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[1];
      o[d][2] *= alpha[0];
      o[d][3] *= alpha[1];
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the 8×8 block of keys 8h.. : (key g, rows 2q, 2q + 1)
    const __half2 p = __floats2half2_rn(expf(s[2 * h] - m_use[0]), expf(s[2 * h + 1] - m_use[1]));
    const float2 back = __half22float2(p);
    l_r[0] += back.x;
    l_r[1] += back.y;
    uint32_t u;
    memcpy(&u, &p, 4);
    pb[h] = movmatrix_trans(u);  // → (row g, keys 8h + 2q, + 1): the B fragment's b0 / b1
  }
}

// O^T += V^T·P^T over 16 FP8 keys (vb: codes as scores_fp8_t's). ldmatrix.trans gives lane (g, q)
// keys 2q, 2q + 1 of dimensions 16d + 2g, + 1 (bytes key-major); the byte permutation pairs the
// keys per dimension: the A fragment's rows g (even dimensions) and g + 8 (odd ones).
template <int HD, KvElement E>
__device__ __forceinline__ void pv_fp8_t(const uint32_t (&pb)[2], const unsigned char* vb, int lane,
                                         float (&o)[HD / 16][4]) {
#pragma unroll
  for (int d = 0; d < HD / 16; d += 2) {
    uint32_t r[4];
    ldmatrix_x4_trans(r, fp8_x4_addr<HD>(vb, 0, d, lane));
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // piece d + j: r[2j] keys 0–7, r[2j + 1] keys 8–15
      const uint32_t lo = __byte_perm(r[2 * j], 0, 0x3120), hi = __byte_perm(r[2 * j + 1], 0, 0x3120);
      const uint32_t a[4] = {fp8x2_to_half2<E>(lo), fp8x2_to_half2<E>(lo >> 16), fp8x2_to_half2<E>(hi),
                             fp8x2_to_half2<E>(hi >> 16)};
      mma_f16(o[d + j], a, pb[0], pb[1]);
    }
  }
}

// One warp's 16 keys of a tile, transposed: scores, online softmax, P·V.
template <int HD, KvElement E>
__device__ __forceinline__ void attend_tile_fp8_t(const unsigned char* kb, const unsigned char* vb,
                                                  const uint32_t (&qf)[HD / 16][2], const float (&scale_r)[2],
                                                  bool full, int64_t jbase, const int64_t (&lo_r)[2],
                                                  const int64_t (&pos_r)[2], int lane, float (&m_r)[2],
                                                  float (&l_r)[2], float (&o)[HD / 16][4]) {
  float s[4];
  scores_fp8_t<HD, E>(kb, qf, lane, s);
  uint32_t pb[2];
  softmax_tile_t<HD>(s, scale_r, full, jbase, lo_r, pos_r, lane, m_r, l_r, o, pb);
  pv_fp8_t<HD, E>(pb, vb, lane, o);
}

}  // namespace fp8lm::cuda::attention_detail
