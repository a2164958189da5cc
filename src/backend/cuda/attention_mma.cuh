// What the tensor-core attention kernels share (paged_attention.cu's prefill and key-split forms,
// paged_attention_decode.cu's warp-pipelined decode form): element traits of the KV cache, the
// kernels' argument struct, the mma.sync / ldmatrix primitives, and the end of a key-split CTA
// (its warps' softmax states merged, the rows normalized and written).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/device_helpers.cuh"
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

inline constexpr int kBN = 64;  // keys per tile
inline constexpr int kFlashThreads = 128;
inline constexpr int kFlashWarps = kFlashThreads / 32;
inline constexpr int kKeySplitRows = 16;  // packed rows per CTA of the key-split (decode) form: one MMA row tile

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
  // Sequences with at most this many new tokens are the decode kernel's
  // (kDecodeMaxNewTokens), or none (0) when this kernel takes every row.
  int decode_max_new_tokens;
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

// Two FP8 codes → two exact BF16 values (code value, unscaled), low first.
template <KvElement E>
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t pair) {
  const float2 f = fp8x2_to_float2<E>(pair);
  return pack_bf16x2(__floats2bfloat162_rn(f.x, f.y));
}

// 16 FP8 codes → 16 exact BF16 values, written as two 16-byte stores.
template <KvElement E>
__device__ __forceinline__ void expand_fp8x16(const unsigned char* src, unsigned char* dst) {
  const uint4 c = *reinterpret_cast<const uint4*>(src);
  const uint32_t w[4] = {c.x, c.y, c.z, c.w};
  uint32_t b[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    b[2 * i] = fp8x2_to_bf16x2<E>(w[i]);
    b[2 * i + 1] = fp8x2_to_bf16x2<E>(w[i] >> 16);
  }
  auto* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(b[0], b[1], b[2], b[3]);
  d[1] = make_uint4(b[4], b[5], b[6], b[7]);
}

// One key tile of a warp: S = Q·Kᵀ for its 16 rows (qf: Q's A fragments) over kWarpKeys keys
// (rows key0.. of kb, BF16 rows of kStride elements), scaled and masked (keys outside
// [lo_r, pos_r] of each row, unless the whole tile is visible: full), the online softmax state
// (m_r, l_r, o) updated with P rounded to BF16 (and summed as rounded), O += P·V (vb likewise).
// jbase: the position of key key0.
template <int HD, int kWarpKeys, int kStride>
__device__ __forceinline__ void attend_tile(const unsigned char* kb, const unsigned char* vb, int key0,
                                            const uint32_t (&qf)[HD / 16][4], float score_scale, bool full,
                                            int64_t jbase, const int64_t (&lo_r)[2], const int64_t (&pos_r)[2],
                                            int lane, float (&m_r)[2], float (&l_r)[2], float (&o)[HD / 8][4]) {
  float s[kWarpKeys / 8][4];
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

  uint32_t pk[kWarpKeys / 8][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kWarpKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[nt][2 * i + e];
        x *= score_scale;
        if (!full) {
          const int64_t j = jbase + nt * 8 + (lane & 3) * 2 + e;
          if (j < lo_r[i] || j > pos_r[i]) x = -INFINITY;
        }
        mx = fmaxf(mx, x);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float m_new = fmaxf(m_r[i], mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing seen yet
    const float alpha = expf(m_r[i] - m_use);
    m_r[i] = m_new;
    l_r[i] *= alpha;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      o[nt][2 * i] *= alpha;
      o[nt][2 * i + 1] *= alpha;
    }
#pragma unroll
    for (int nt = 0; nt < kWarpKeys / 8; ++nt) {
      const __nv_bfloat162 p = __floats2bfloat162_rn(expf(s[nt][2 * i] - m_use), expf(s[nt][2 * i + 1] - m_use));
      const float2 back = __bfloat1622float2(p);
      l_r[i] += back.x + back.y;
      pk[nt][i] = pack_bf16x2(p);
    }
  }

  // The S accumulators of two 8-key tiles are the A fragment of one 16-key step.
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

// Shared memory the key-split merge needs: every warp's maxima, sums and outputs of 16 rows.
template <int HD>
constexpr int kKeySplitMergeBytes = kFlashWarps * kKeySplitRows * (HD + 2) * 4;

// The end of a key-split CTA: its warps hold online-softmax states (maxima m_r, partial sums
// l_r, unnormalized outputs o) of the same 16 rows over different keys. Every warp leaves them
// in shared memory (smem: kKeySplitMergeBytes, no longer used by the kernel), then warp 0
// rescales them to the common maximum and adds them up, warps in order, into its own l_r and o.
// Returns whether this warp has the rows to write (warp 0).
template <int HD>
__device__ __forceinline__ bool merge_key_split_warps(unsigned char* smem, int warp, int lane, const float (&m_r)[2],
                                                      float (&l_r)[2], float (&o)[HD / 8][4]) {
  float* mbuf = reinterpret_cast<float*>(smem);       // [warp][16 rows]
  float* lbuf = mbuf + kFlashWarps * 16;              // [warp][16 rows]
  float* obuf = lbuf + kFlashWarps * 16;              // [warp][16 rows][HD]
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = l_r[i];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
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
// head_r of KV head kvh, ok_r false past the sequence) by their sums and writes them as BF16.
template <int HD>
__device__ __forceinline__ void write_attention_rows(const FlashArgs& a, int64_t first_row, int kvh,
                                                     const bool (&ok_r)[2], const int (&tok_r)[2],
                                                     const int (&head_r)[2], int lane, const float (&l_r)[2],
                                                     const float (&o)[HD / 8][4]) {
  const int64_t q_stride = int64_t(a.num_heads) * HD;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = l_r[i];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    if (!ok_r[i]) continue;
    __nv_bfloat16* dst =
        a.out + (first_row + tok_r[i]) * q_stride + (int64_t(kvh) * a.group + head_r[i]) * HD + (lane & 3) * 2;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      const float x0 = (o[nt][2 * i] * a.v_scale) / l, x1 = (o[nt][2 * i + 1] * a.v_scale) / l;
      *reinterpret_cast<__nv_bfloat162*>(dst + nt * 8) = __floats2bfloat162_rn(x0, x1);
    }
  }
}

// The warp-pipelined decode form (paged_attention_decode.cu): the key-split CTA's work with each
// warp streaming its own quarter of every tile through its own multi-stage copy ring, so no warp
// waits for another until the merge. Launches one CTA per (sequence, 16 packed rows) × KV head.
void launch_warp_decode(int head_dim, KvElement element, const FlashArgs& a, unsigned blocks, cudaStream_t stream);

}  // namespace fp8lm::cuda::attention_detail
