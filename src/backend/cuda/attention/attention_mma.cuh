// What the attention kernels share (paged_attention.cu's tensor-core prefill kernel and SIMT
// kernels, paged_attention_decode.cu's tensor-core decode kernel): element traits of the KV cache,
// the tensor-core kernels' argument struct, the mma.sync / ldmatrix primitives, one key tile's
// steps over BF16 tiles (scores, online softmax, P·V) and over FP8 codes in FP16 registers, the
// end of a key-split CTA (its warps' softmax states merged, the rows normalized and written), and
// the warp merge of a row's partial states.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/paged_kv_types.h"

namespace fp8lm::cuda::attention_detail {

using backend::KvElement;

inline constexpr unsigned kFullMask = 0xffffffffu;

template <KvElement E>
constexpr int kElemBytes = E == KvElement::kF32 ? 4 : E == KvElement::kBF16 ? 2 : 1;

template <KvElement E>
constexpr bool kIsFp8 = E == KvElement::kE4M3 || E == KvElement::kE5M2;

template <KvElement E>
constexpr __nv_fp8_interpretation_t kInterp = E == KvElement::kE5M2 ? __NV_E5M2 : __NV_E4M3;

// First position a token at position p attends (window ≤ 0: none).
__device__ __forceinline__ int64_t window_lo(int64_t p, int64_t window) {
  return window > 0 ? (p - window + 1 > 0 ? p - window + 1 : 0) : 0;
}

// Two FP8 codes (low byte first) → their exact float values (NaN and inf included).
template <KvElement E>
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), kInterp<E>);
  return __half22float2(__half2(h));
}

// A lane's two MMA fragment rows among a CTA's packed (token, query head) rows: row
// r_first + i · r_step is token r / G, head r % G of the KV head's group, at position start +
// token (−1 past the sequence's rows: every key masked), attending from window_lo of it.
struct LaneRows {
  int64_t pos[2], lo[2];
  int tok[2], head[2];
  bool ok[2];
};

__device__ __forceinline__ LaneRows lane_rows(int r_first, int r_step, int rows_total, int G, int64_t start,
                                              int64_t window) {
  LaneRows l;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r_first + i * r_step;
    l.ok[i] = r < rows_total;
    l.tok[i] = r / G;
    l.head[i] = r % G;
    l.pos[i] = l.ok[i] ? start + l.tok[i] : -1;
    l.lo[i] = l.ok[i] ? window_lo(l.pos[i], window) : 0;
  }
  return l;
}

inline constexpr int kBN = 64;  // keys per tile
inline constexpr int kFlashThreads = 128;
inline constexpr int kFlashWarps = kFlashThreads / 32;
inline constexpr int kKeySplitRows = 16;  // packed rows per CTA of the key-split (decode) form: one MMA row tile
inline constexpr int kDecodeTRows = 8;    // rows a warp of the pair decode kernel fits (decode_mma_t.cuh): the MMA's N

struct FlashArgs {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const int32_t* seq_first_row;
  const int32_t* seq_num_tokens;
  const int32_t* seq_start_position;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  const void* k;
  const void* v;
  int num_heads, num_kv_heads, group, block_size;
  int64_t window;
  float score_scale, v_scale;
  int tiles;  // query tiles per sequence: grid.x = num_seqs × tiles
  int num_seqs;  // the pair decode kernel's (sequence, KV head) pairs: num_seqs × num_kv_heads
  // The prefill kernel: sequences with at most this many new tokens are the decode kernel's
  // (kDecodeMaxNewTokens), or none (0). The decode kernel: sequences with more are the prefill
  // kernel's, or none (0).
  int decode_max_new_tokens;
  // The decode kernel's split over the context (launch_warp_decode): grid.z = chunks of
  // chunk_tiles key tiles each. A row whose keys span several chunks leaves each chunk's
  // partial state in part_o / part_m / part_l at [slot = sequence · tcap + token][head][chunk]
  // (RowArgs' layout, merged by the reduce kernel); a row within one chunk is written whole.
  int chunks, chunk_tiles, tcap;
  float* part_o;
  float* part_m;
  float* part_l;
  // Zeroed counters, one per (sequence, row tile, KV head) (kAttentionMergeCounters of them):
  // the last of a tile's chunks to finish merges its rows, and leaves the counter at zero; null:
  // the reduce kernel merges.
  unsigned* merge_counters;
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a · b, 16×16 BF16 (row) × 16×8 BF16 (col), float32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(__nv_bfloat162 x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// A row's MMA accumulators are spread over the four lanes of a quad (lane & 3): their sum and
// their maximum.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}

// The online softmax's running state of a row (maximum m, sum l) moved to a tile's maximum mx:
// returns the factor that rescales what was summed so far (l here; the caller's outputs), and
// m_use, the maximum to subtract from the tile's scores (0 for a row with nothing seen yet).
__device__ __forceinline__ float move_row_max(float mx, float& m, float& l, float& m_use) {
  const float m_new = fmaxf(m, mx);
  m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = expf(m - m_use);
  m = m_new;
  l *= alpha;
  return alpha;
}

// Four BF16 values at p (8-byte aligned) as floats.
__device__ __forceinline__ void load_bf16x4(const unsigned char* p, float (&x)[4]) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  x[0] = bf16_bits_to_float(uint16_t(w.x & 0xFFFFu));
  x[1] = bf16_bits_to_float(uint16_t(w.x >> 16));
  x[2] = bf16_bits_to_float(uint16_t(w.y & 0xFFFFu));
  x[3] = bf16_bits_to_float(uint16_t(w.y >> 16));
}

__device__ __forceinline__ float abs_max4(const float (&x)[4]) {
  return fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
}

// The power of two that brings a row of Q into FP16's range for the FP8 steps: up = 2^e puts
// the row's largest |q| (amax) in [2^14, 2^15), e in [-40, 40] (0 for a zero or non-finite row);
// down = 2^-e takes it back out of the scores.
struct Fp16RowScale {
  float up, down;
};
__device__ __forceinline__ Fp16RowScale fp16_row_scale(float amax) {
  int e = 0;
  if (amax > 0.0f && isfinite(amax)) {
    int ex = 0;
    frexpf(amax, &ex);  // amax = f · 2^ex, f in [0.5, 1)
    e = min(max(15 - ex, -40), 40);
  }
  return {__int_as_float((127 + e) << 23), __int_as_float((127 - e) << 23)};
}

// S = Q·Kᵀ of a warp's 16 rows (qf: Q's A fragments) over kWarpKeys keys: rows key0.. of kb,
// BF16 rows of kStride elements.
template <int HD, int kWarpKeys, int kStride>
__device__ __forceinline__ void scores_bf16(const unsigned char* kb, int key0, const uint32_t (&qf)[HD / 16][4],
                                            int lane, float (&s)[kWarpKeys / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kWarpKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < kWarpKeys / 16; ++np) {
      uint32_t b[4];
      const int key = key0 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
      const int col = ks * 16 + (((lane >> 3) & 1) << 3);
      ldmatrix_x4(b, smem_addr(kb + (key * kStride + col) * 2));
      mma_bf16(s[2 * np], qf[ks], b[0], b[1]);
      mma_bf16(s[2 * np + 1], qf[ks], b[2], b[3]);
    }
  }
}

// The online softmax of one key tile: S scaled (scale_r: per fragment row) and masked (keys
// outside [lo_r, pos_r] of each row, unless the whole tile is visible: full; jbase: the position
// of the tile's first key), the running state (m_r, l_r, o) moved to the new maxima, and P
// rounded to BF16 (kHalf: FP16) and summed as rounded, returned as the A fragments' pairs pk.
// o is rescaled only when some row's maximum moved (a factor of 1 changes no bit): past the
// first tiles of a long context it rarely does.
template <int HD, int kWarpKeys, bool kHalf>
__device__ __forceinline__ void softmax_tile(float (&s)[kWarpKeys / 8][4], const float (&scale_r)[2], bool full,
                                             int64_t jbase, const int64_t (&lo_r)[2], const int64_t (&pos_r)[2],
                                             int lane, float (&m_r)[2], float (&l_r)[2], float (&o)[HD / 8][4],
                                             uint32_t (&pk)[kWarpKeys / 8][2]) {
  float m_use[2], alpha[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kWarpKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[nt][2 * i + e];
        x *= scale_r[i];
        if (!full) {
          const int64_t j = jbase + nt * 8 + (lane & 3) * 2 + e;
          if (j < lo_r[i] || j > pos_r[i]) x = -INFINITY;
        }
        mx = fmaxf(mx, x);
      }
    }
    alpha[i] = move_row_max(quad_max(mx), m_r[i], l_r[i], m_use[i]);
  }
  if (__any_sync(kFullMask, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int nt = 0; nt < kWarpKeys / 8; ++nt) {
      const float e0 = expf(s[nt][2 * i] - m_use[i]), e1 = expf(s[nt][2 * i + 1] - m_use[i]);
      float2 back;
      if constexpr (kHalf) {
        const __half2 p = __floats2half2_rn(e0, e1);
        back = __half22float2(p);
        memcpy(&pk[nt][i], &p, 4);
      } else {
        const __nv_bfloat162 p = __floats2bfloat162_rn(e0, e1);
        back = __bfloat1622float2(p);
        pk[nt][i] = pack_bf16x2(p);
      }
      l_r[i] += back.x + back.y;
    }
  }
}

// O += P·V over the warp's kWarpKeys keys (pk: softmax_tile's BF16 pairs; V: rows key0.. of vb,
// BF16 rows of kStride elements). The S accumulators of two 8-key tiles are the A fragment of
// one 16-key step.
template <int HD, int kWarpKeys, int kStride>
__device__ __forceinline__ void pv_bf16(const uint32_t (&pk)[kWarpKeys / 8][2], const unsigned char* vb, int key0,
                                        int lane, float (&o)[HD / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kWarpKeys / 16; ++kk) {
    const uint32_t pa[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b[4];
      const int key = key0 + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
      const int col = dp * 16 + ((lane >> 4) << 3);
      ldmatrix_x4_trans(b, smem_addr(vb + (key * kStride + col) * 2));
      mma_bf16(o[2 * dp], pa, b[0], b[1]);
      mma_bf16(o[2 * dp + 1], pa, b[2], b[3]);
    }
  }
}

// One key tile of a warp over BF16 K and V tiles: scores, online softmax, P·V (above), every row
// scaled by score_scale.
template <int HD, int kWarpKeys, int kStride>
__device__ __forceinline__ void attend_tile(const unsigned char* kb, const unsigned char* vb, int key0,
                                            const uint32_t (&qf)[HD / 16][4], float score_scale, bool full,
                                            int64_t jbase, const int64_t (&lo_r)[2], const int64_t (&pos_r)[2],
                                            int lane, float (&m_r)[2], float (&l_r)[2], float (&o)[HD / 8][4]) {
  float s[kWarpKeys / 8][4];
  scores_bf16<HD, kWarpKeys, kStride>(kb, key0, qf, lane, s);
  uint32_t pk[kWarpKeys / 8][2];
  const float scale_r[2] = {score_scale, score_scale};
  softmax_tile<HD, kWarpKeys, false>(s, scale_r, full, jbase, lo_r, pos_r, lane, m_r, l_r, o, pk);
  pv_bf16<HD, kWarpKeys, kStride>(pk, vb, key0, lane, o);
}

// ---- FP8 tiles in registers ---------------------------------------------------------------
// An FP8 cache's tiles stay codes in shared memory and become FP16 in registers right before
// FP16 MMAs: exact, as every E4M3 and E5M2 value is an FP16 value.
//   * K: ldmatrix hands each lane 4 consecutive codes of a key, whose two FP16 pairs are its B
//     fragment over a permuted order of the 16 dimensions of a k-step; Q's A fragments are built
//     in the same order (fp8_q_fragments; the dot product does not depend on the order). Q is
//     converted to FP16 times a power of two per row that puts the row's largest |q| in
//     [2^14, 2^15): every BF16 value of the row at or above 2^-28 of its maximum is exact in
//     FP16 (smaller ones round to FP16's subnormal step, ≤ 2^-39 of the maximum), and dividing
//     the power back out of the scores is exact.
//   * V: ldmatrix.trans hands each lane two keys' pairs of codes of one dimension pair; a byte
//     permute makes them the B fragments of an even-dimension and an odd-dimension n-tile, so
//     the output accumulators hold dimensions in that order (acc_dim).
//   * P is rounded to FP16 and the normalizer sums it as rounded.

// FP8 rows are HD bytes: the 16-byte piece ch of key `key` is stored at piece fp8_piece(key, ch),
// an XOR swizzle that puts the 8 rows one ldmatrix reads in 8 different 16-byte bank groups.
template <int HD>
__device__ __forceinline__ int fp8_piece(int key, int ch) {
  static_assert(HD == 64 || HD == 128, "FP8 rows of 4 or 8 pieces");
  constexpr int kPieces = HD / 16, kKeysPerLine = 8 / kPieces;
  return ch ^ ((key / kKeysPerLine) & (kPieces - 1));
}

// Two FP8 codes (the low 16 bits, low byte first) → their exact FP16 values.
template <KvElement E>
__device__ __forceinline__ uint32_t fp8x2_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), kInterp<E>);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// c += a · b, 16×16 FP16 (row) × 16×8 FP16 (col), float32 accumulators.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The lanes' row addresses for an x4 ldmatrix over 16 FP8 keys from key0 and two 16-byte pieces
// (matrices: keys 0–7 piece ch, keys 8–15 piece ch, keys 0–7 piece ch + 1, keys 8–15 piece ch + 1).
template <int HD>
__device__ __forceinline__ uint32_t fp8_x4_addr(const unsigned char* tile, int key0, int ch, int lane) {
  const int key = key0 + (lane & 7) + (((lane >> 3) & 1) << 3);
  return smem_addr(tile + key * HD + fp8_piece<HD>(key, ch + (lane >> 4)) * 16);
}

// The dimension of accumulator o[nt][2·i + e] of lane group q = lane & 3 (either row i): P·V on
// BF16 tiles (pv_bf16) or on FP8 codes (pv_fp8).
template <bool kFp8>
__device__ __forceinline__ int acc_dim(int nt, int q, int e) {
  return kFp8 ? 16 * (nt >> 1) + 4 * q + 2 * e + (nt & 1) : nt * 8 + 2 * q + e;
}

// Pair pr (of kTiles = HD / 8) of row i's accumulators, which hold two adjacent dimensions: (nt = pr,
// e = 0, 1) after pv_bf16, (nt = 2·(pr / 2), + 1; e = pr & 1) after pv_fp8. Returns the first
// dimension; x0, x1 the values.
template <bool kFp8, int kTiles>
__device__ __forceinline__ int acc_pair(const float (&o)[kTiles][4], int i, int pr, int q, float& x0, float& x1) {
  const int nt0 = kFp8 ? (pr >> 1) * 2 : pr, nt1 = kFp8 ? nt0 + 1 : pr;
  const int e0 = kFp8 ? (pr & 1) : 0, e1 = kFp8 ? e0 : 1;
  x0 = o[nt0][2 * i + e0];
  x1 = o[nt1][2 * i + e1];
  return acc_dim<kFp8>(nt0, q, e0);
}

// Q's A fragments for the FP8 scores, in FP16 (qs: the warp's 16 BF16 rows in shared memory,
// kStride elements apart): lane (g = lane / 4, q = lane & 3) holds rows g and g + 8, dimensions
// 16c + 4q .. + 3 of k-step c (a0 / a1 the first two, a2 / a3 the last two), times 2^e_r with e_r
// putting the row's largest |q| in [2^14, 2^15); scale_r = score_scale · 2^-e_r takes it back out.
template <int HD, int kStride>
__device__ __forceinline__ void fp8_q_fragments(const unsigned char* qs, int lane, float score_scale,
                                                uint32_t (&qf)[HD / 16][4], float (&scale_r)[2]) {
  const int g = lane >> 2, q4 = (lane & 3) * 4;
  auto load4 = [&](int i, int c, float (&x)[4]) { load_bf16x4(qs + ((g + 8 * i) * kStride + 16 * c + q4) * 2, x); };
  float up[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float amax = 0.0f;
#pragma unroll
    for (int c = 0; c < HD / 16; ++c) {
      float x[4];
      load4(i, c, x);
      amax = fmaxf(amax, abs_max4(x));
    }
    const Fp16RowScale rs = fp16_row_scale(quad_max(amax));
    up[i] = rs.up;
    scale_r[i] = score_scale * rs.down;
  }
#pragma unroll
  for (int c = 0; c < HD / 16; ++c) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float x[4];
      load4(i, c, x);
      const __half2 lo = __floats2half2_rn(x[0] * up[i], x[1] * up[i]);
      const __half2 hi = __floats2half2_rn(x[2] * up[i], x[3] * up[i]);
      memcpy(&qf[c][i], &lo, 4);
      memcpy(&qf[c][2 + i], &hi, 4);
    }
  }
}

// S = Q·Kᵀ over kWarpKeys FP8 keys from key0 (kb: codes, rows of HD bytes, fp8_piece order) with
// FP16 MMAs; qf from fp8_q_fragments.
template <int HD, KvElement E, int kWarpKeys>
__device__ __forceinline__ void scores_fp8(const unsigned char* kb, int key0, const uint32_t (&qf)[HD / 16][4],
                                           int lane, float (&s)[kWarpKeys / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kWarpKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int np = 0; np < kWarpKeys / 16; ++np) {
#pragma unroll
    for (int c = 0; c < HD / 16; c += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, fp8_x4_addr<HD>(kb, key0 + np * 16, c, lane));
#pragma unroll
      for (int m = 0; m < 4; ++m)  // m: keys 8·(m & 1).. of the 16, k-step c + m / 2
        mma_f16(s[2 * np + (m & 1)], qf[c + m / 2], fp8x2_to_half2<E>(r[m]), fp8x2_to_half2<E>(r[m] >> 16));
    }
  }
}

// O += P·V over kWarpKeys FP8 keys from key0 (vb: codes as scores_fp8's; pk: FP16 pairs from
// softmax_tile<…, true>). o[2d] gathers dimensions 16d + 2n, o[2d + 1] dimensions 16d + 2n + 1
// (n: the MMA column): acc_dim<true>.
template <int HD, KvElement E, int kWarpKeys>
__device__ __forceinline__ void pv_fp8(const uint32_t (&pk)[kWarpKeys / 8][2], const unsigned char* vb, int key0,
                                       int lane, float (&o)[HD / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kWarpKeys / 16; ++kk) {
    const uint32_t pa[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
#pragma unroll
    for (int d = 0; d < HD / 16; d += 2) {
      uint32_t r[4];
      ldmatrix_x4_trans(r, fp8_x4_addr<HD>(vb, key0 + kk * 16, d, lane));
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // Bytes (key 2q: dims e, o; key 2q + 1: dims e, o) → (2q e, 2q+1 e | 2q o, 2q+1 o).
        const uint32_t lo = __byte_perm(r[2 * j], 0, 0x3120), hi = __byte_perm(r[2 * j + 1], 0, 0x3120);
        mma_f16(o[2 * (d + j)], pa, fp8x2_to_half2<E>(lo), fp8x2_to_half2<E>(hi));
        mma_f16(o[2 * (d + j) + 1], pa, fp8x2_to_half2<E>(lo >> 16), fp8x2_to_half2<E>(hi >> 16));
      }
    }
  }
}

// One key tile of a warp over FP8 K and V codes: scores, online softmax, P·V (above).
template <int HD, KvElement E, int kWarpKeys>
__device__ __forceinline__ void attend_tile_fp8(const unsigned char* kb, const unsigned char* vb, int key0,
                                                const uint32_t (&qf)[HD / 16][4], const float (&scale_r)[2], bool full,
                                                int64_t jbase, const int64_t (&lo_r)[2], const int64_t (&pos_r)[2],
                                                int lane, float (&m_r)[2], float (&l_r)[2], float (&o)[HD / 8][4]) {
  float s[kWarpKeys / 8][4];
  scores_fp8<HD, E, kWarpKeys>(kb, key0, qf, lane, s);
  uint32_t pk[kWarpKeys / 8][2];
  softmax_tile<HD, kWarpKeys, true>(s, scale_r, full, jbase, lo_r, pos_r, lane, m_r, l_r, o, pk);
  pv_fp8<HD, E, kWarpKeys>(pk, vb, key0, lane, o);
}

// Shared memory the key-split merge needs: every warp's maxima, sums and outputs of 16 rows.
template <int HD>
constexpr int kKeySplitMergeBytes = kFlashWarps * kKeySplitRows * (HD + 2) * 4;

// The end of a key-split CTA: its warps hold online-softmax states (maxima m_r, partial sums
// l_r, unnormalized outputs o) of the same 16 rows over different keys. Every warp leaves them
// in shared memory (smem: kKeySplitMergeBytes, no longer used by the kernel), then warp 0
// rescales them to the common maximum and adds them up, warps in order, into its own m_r (the
// common maximum), l_r and o. Returns whether this warp has the rows to write (warp 0).
template <int HD>
__device__ __forceinline__ bool merge_key_split_warps(unsigned char* smem, int warp, int lane, float (&m_r)[2],
                                                      float (&l_r)[2], float (&o)[HD / 8][4]) {
  float* mbuf = reinterpret_cast<float*>(smem);       // [warp][16 rows]
  float* lbuf = mbuf + kFlashWarps * 16;              // [warp][16 rows]
  float* obuf = lbuf + kFlashWarps * 16;              // [warp][16 rows][HD]
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(l_r[i]);
    const int row = lane / 4 + 8 * i;
    if ((lane & 3) == 0) {
      mbuf[warp * 16 + row] = m_r[i];
      lbuf[warp * 16 + row] = l;
    }
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      float* dst = obuf + (warp * 16 + row) * HD + nt * 8 + (lane & 3) * 2;
      dst[0] = o[nt][2 * i];
      dst[1] = o[nt][2 * i + 1];
    }
  }
  __syncthreads();
  if (warp != 0) return false;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = lane / 4 + 8 * i;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kFlashWarps; ++w) m = fmaxf(m, mbuf[w * 16 + row]);
    const float m_use = m == -INFINITY ? 0.0f : m;
    m_r[i] = m;
    float f[kFlashWarps], l = 0.0f;
#pragma unroll
    for (int w = 0; w < kFlashWarps; ++w) {
      f[w] = expf(mbuf[w * 16 + row] - m_use);
      l += lbuf[w * 16 + row] * f[w];
    }
    // Every lane of the quad has the row's whole sum: the quad's first keeps it, so that
    // the quad sum of write_attention_rows gives it back once.
    l_r[i] = (lane & 3) == 0 ? l : 0.0f;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      float x0 = 0.0f, x1 = 0.0f;
#pragma unroll
      for (int w = 0; w < kFlashWarps; ++w) {
        const float* src = obuf + (w * 16 + row) * HD + nt * 8 + (lane & 3) * 2;
        x0 += src[0] * f[w];
        x1 += src[1] * f[w];
      }
      o[nt][2 * i] = x0;
      o[nt][2 * i + 1] = x1;
    }
  }
  return true;
}

// Normalizes a warp's 16 rows (fragment rows lane / 4 and lane / 4 + 8: token tok_r, query head
// head_r of KV head kvh, ok_r false past the sequence) by their sums and writes them as BF16;
// kFp8: o in pv_fp8's dimension order (acc_dim).
template <int HD, bool kFp8>
__device__ __forceinline__ void write_attention_rows(const FlashArgs& a, int64_t first_row, int kvh,
                                                     const bool (&ok_r)[2], const int (&tok_r)[2],
                                                     const int (&head_r)[2], int lane, const float (&l_r)[2],
                                                     const float (&o)[HD / 8][4]) {
  const int64_t q_stride = int64_t(a.num_heads) * HD;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(l_r[i]);
    if (!ok_r[i]) continue;
    __nv_bfloat16* dst = a.out + (first_row + tok_r[i]) * q_stride + (int64_t(kvh) * a.group + head_r[i]) * HD;
#pragma unroll
    for (int pr = 0; pr < HD / 8; ++pr) {
      float x0, x1;
      const int dim = acc_pair<kFp8>(o, i, pr, lane & 3, x0, x1);
      *reinterpret_cast<__nv_bfloat162*>(dst + dim) =
          __floats2bfloat162_rn((x0 * a.v_scale) / l, (x1 * a.v_scale) / l);
    }
  }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, m));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) x += __shfl_xor_sync(kFullMask, x, m);
  return x;
}

// One warp: the log-sum-exp merge of a row's partial states [p_lo, p_hi] (maxima part_m, sums
// part_l, unnormalized outputs part_o of hd floats, at base + i), × v_scale, written to dst as
// BF16. The lanes take the partials for the maximum and the sum (warp reductions), then 4
// consecutive dimensions each, over every partial in 16-byte loads unrolled so that many are in
// flight at once. (The first fused form looped over the partials per dimension, a chain of L2
// round trips: attention measured 6 µs a layer slower than with the separate merge kernel.)
// The partials come through L2 (__ldcg): other CTAs wrote them.
__device__ __forceinline__ void merge_partials_warp(const float* part_o, const float* part_m, const float* part_l,
                                                    int64_t base, int p_lo, int p_hi, int hd, float v_scale,
                                                    __nv_bfloat16* dst, int lane) {
  float m = -INFINITY;
  for (int i = p_lo + lane; i <= p_hi; i += 32) m = fmaxf(m, __ldcg(part_m + base + i));
  m = warp_max(m);
  float l = 0.0f;
  for (int i = p_lo + lane; i <= p_hi; i += 32) l += __ldcg(part_l + base + i) * expf(__ldcg(part_m + base + i) - m);
  l = warp_sum(l);
  for (int d = 4 * lane; d < hd; d += 128) {  // head_dim is a multiple of 8: whole float4s
    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
    for (int i = p_lo; i <= p_hi; ++i) {
      const float w = expf(__ldcg(part_m + base + i) - m);
      const float4 v = __ldcg(reinterpret_cast<const float4*>(part_o + (base + i) * hd + d));
      o[0] = fmaf(v.x, w, o[0]);
      o[1] = fmaf(v.y, w, o[1]);
      o[2] = fmaf(v.z, w, o[2]);
      o[3] = fmaf(v.w, w, o[3]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) dst[d + j] = __float2bfloat16_rn((o[j] * v_scale) / l);
  }
}

// The tensor-core decode kernel (paged_attention_decode.cu): each warp streams its own quarter of
// every tile through its own multi-stage copy ring, so no warp waits for another until the merge.
// Launches one CTA per (sequence, 16 packed rows) × KV head × context chunk (a.chunks).
void launch_warp_decode(int head_dim, KvElement element, const FlashArgs& a, unsigned blocks, cudaStream_t stream);

// The decode kernels' gather (paged_attention_decode.cu, paged_attention_decode_pairs.cu): a warp
// copies 16 keys at a time into a stage of its own ring. The byte offset in the cache of key j
// (the key lane & 15 owns) of KV head kvh, −1 where it is not gathered: keys [lo, hi] are, others
// are zero-filled without touching the block table (blocks outside a sliding window may already
// be someone else's).
template <int HD, KvElement E>
__device__ __forceinline__ int64_t warp_key_offset(int64_t j, int64_t lo, int64_t hi, const int32_t* table,
                                                   int block_size, int num_kv_heads, int kvh) {
  if (j < lo || j > hi) return -1;
  const int jj = int(j);  // positions fit an int (max_model_len)
  const int64_t block = table[jj / block_size];
  return ((block * num_kv_heads + kvh) * block_size + jj % block_size) * HD * kElemBytes<E>;
}

// The warp's 16 keys into a stage: K at kdst, V kRow · 16 bytes after it, key rows kRow bytes
// apart (FP8: pieces swizzled by fp8_piece); offset: this lane's warp_key_offset, shuffled to
// the lanes copying the key's pieces.
template <int HD, KvElement E, int kRow>
__device__ __forceinline__ void copy_warp_keys(unsigned char* kdst, int64_t offset, int lane, const void* k,
                                               const void* v) {
  constexpr int kKeys = 16;
  constexpr int kCpr = HD * kElemBytes<E> / 16;
  static_assert(kKeys * kCpr % 32 == 0, "every lane shuffles as often");
  unsigned char* vdst = kdst + kKeys * kRow;
  for (int idx = lane; idx < kKeys * kCpr; idx += 32) {
    const int key = idx / kCpr, ch = idx % kCpr;
    const int64_t key_off = __shfl_sync(kFullMask, offset, key);
    const bool ok = key_off >= 0;
    const int64_t off = ok ? key_off + ch * 16 : 0;
    const int at = key * kRow + (kIsFp8<E> ? fp8_piece<HD>(key, ch) : ch) * 16;
    cp_async16(smem_addr(kdst + at), static_cast<const unsigned char*>(k) + off, ok ? 16 : 0);
    cp_async16(smem_addr(vdst + at), static_cast<const unsigned char*>(v) + off, ok ? 16 : 0);
  }
}

// paged_attention_decode_pairs.cu: the decode rows of an FP8 cache whose decoding sequences'
// rows fit kDecodeTRows, one warp per (sequence, KV head) over its whole context (no split:
// a.chunks is ignored; a.decode_max_new_tokens > 0 skips the sequences with more new tokens).
void launch_pair_decode(int head_dim, KvElement element, const FlashArgs& a, cudaStream_t stream);

}  // namespace fp8lm::cuda::attention_detail
