// FP8 weight-streaming GEMM for decode sizes; see fp8_gemv.h for the contract.
//
// Layout of the work (one warp = 16 weight rows × a range of 128-wide K chunks):
//   * Lane (g = lane / 4, t = lane % 4) loads, per chunk, the 16-byte pieces
//     [64u + 16t, 64u + 16t + 16) (u = 0, 1) of weight rows g and g + 8: the 4 lanes of a
//     group read 64 contiguous bytes of a row, every byte of the 16 rows exactly once.
//   * Each 32-bit word of codes (bytes b0..b3 at K = 4q..4q+3 of a piece) becomes the two
//     MMA A-registers (b0, b2) and (b1, b3) of one m16n8k16 step: the MMA sees K in a
//     permuted order, and the activations are staged in shared memory in the same order
//     (x0, x2, x1, x3 in every group of 4), so the dot products are unchanged.
//   * The activations (m ≤ 16 rows) are the MMA's 8-column B operand (two MMAs for m > 8).
//   * 3 or 4 chunks (16 registers each) are in flight per warp while one is multiplied.
// A block of 8 warps covers 16·row_tiles rows; its 8 / row_tiles warp columns split the
// block's K range, and k_splits ranges of K go to different blocks. Warp partials are summed
// in shared memory in a fixed order; block partials (k_splits > 1) go to the workspace and the
// last block of a row group (a counter, not atomics on data) sums them in split order.
#include "backend/cuda/fp8_gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/device_helpers.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 128;  // K per pipeline stage, and the width of a scale block
constexpr int kRowPadHalves = 8;  // 16 bytes: rows of staged x start in alternate bank groups
constexpr size_t kSmemLimit = 110 * 1024;  // two blocks per multiprocessor (228 KB each SM)
constexpr int kMaxSplits = 64;
constexpr int64_t kCounterSlots = 16384;  // row groups a split-K call may have
constexpr size_t kCounterBytes = size_t(kCounterSlots) * 4;

struct Params {
  int m, n;
  int64_t k;
  int chunks;      // cdiv(k, 128)
  int row_tiles;   // 16-row tiles per block (warp columns: 8 / row_tiles)
  int splits;      // K ranges across blocks
  int max_len;     // most chunks one block's K range holds
  int x_stride;    // halves per staged activation row
  int xsc_offset;  // bytes: group scales in shared memory
  int xc_offset;   // bytes: raw E4M3 activation codes in shared memory
  const uint8_t* w;
  const float* w_scale;
  int w_layout;  // WeightScaleLayout
  const void* x;  // BF16 values or E4M3 codes
  const float* x_scale;
  int x_layout;  // ActivationScaleLayout
  bool x_vec;    // activations can be read 16 bytes at a time
  bool pdl;      // launched as a programmatic dependent of the previous kernel
  const __nv_bfloat16* bias;
  __nv_bfloat16* y;
  float* partial;      // [splits, m, n]
  unsigned* counters;  // [row groups]
};

constexpr int kWTensor = int(WeightScaleLayout::kTensor);
constexpr int kWChannel = int(WeightScaleLayout::kChannel);
constexpr int kWBlock = int(WeightScaleLayout::kBlock128);
constexpr int kXTensor = int(ActivationScaleLayout::kTensor);
constexpr int kXToken = int(ActivationScaleLayout::kToken);
constexpr int kXGroup = int(ActivationScaleLayout::kGroup128);

// A streamed weight load: read once, so kept out of L1; the 256-byte L2 prefetch hint
// brings the rest of the row segment the group reads next.
__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 weight codes at K = kpos … kpos + 15 of one row (zeros past k).
template <bool kVec>
__device__ __forceinline__ uint4 load_codes(const uint8_t* p, int64_t kpos, int64_t k) {
  if constexpr (kVec) {  // k % 16 == 0: a piece is wholly inside or wholly past the row
    return kpos < k ? ld_stream(p) : make_uint4(0, 0, 0, 0);
  } else {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (kpos + i < k) w[i / 4] |= uint32_t(__ldg(p + i)) << (8 * (i % 4));
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Four E4M3 codes (b0 in the low byte) → (b0, b2) and (b1, b3) as 16-bit pairs:
//   FP16 (kA8): value × 2^-8 — the code's exponent and mantissa moved into place
//     (subnormal codes land on FP16 subnormals with the same scaling).
//   BF16: value × 2^-120 the same way, then × 2^120 (exact: a power of two, no overflow).
template <bool kA8>
__device__ __forceinline__ void expand(uint32_t q, uint32_t& p02, uint32_t& p13) {
  constexpr int kShift = kA8 ? 1 : 4;
  const uint32_t q8 = q << 8;
  p13 = (q & 0x80008000u) | ((q & 0x7F007F00u) >> kShift);
  p02 = (q8 & 0x80008000u) | ((q8 & 0x7F007F00u) >> kShift);
  if constexpr (!kA8) {
    const __nv_bfloat162 k2p120 = __halves2bfloat162(__ushort_as_bfloat16(0x7B80), __ushort_as_bfloat16(0x7B80));
    __nv_bfloat162 a, b;
    std::memcpy(&a, &p02, 4);
    std::memcpy(&b, &p13, 4);
    a = __hmul2(a, k2p120);
    b = __hmul2(b, k2p120);
    std::memcpy(&p02, &a, 4);
    std::memcpy(&p13, &b, 4);
  }
}

template <bool kA8>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  if constexpr (kA8) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

template <bool kFirst, class T>
__device__ __forceinline__ T& pick(T& a, T& b) {
  if constexpr (kFirst) return a;
  else return b;
}

// Two E4M3 codes (lo, hi bytes of `pair`) → exact FP16 values, lo in the low half.
__device__ __forceinline__ uint32_t codes_to_f16x2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Stages the block's activations (K range [kbase, kbase + klen)) in shared memory as 16-bit
// values, every group of 4 stored as (x0, x2, x1, x3); zeros past k. Aligned activations are
// copied with cp.async (all of the block's copies in flight at once), then permuted (BF16, in
// place) or expanded to exact FP16 (E4M3 codes, from their own staging area); the caller's
// __syncthreads() publishes the result.
template <bool kA8>
__device__ void stage_x(const Params& p, unsigned char* smem, int64_t kbase, int klen) {
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem);
  const int64_t k = p.k;
  if (p.x_vec) {
    constexpr int kPer = kA8 ? 16 : 8;  // elements per 16-byte copy
    constexpr int kSize = kA8 ? 1 : 2;  // bytes per element
    const int units = klen / kPer;
    unsigned char* raw = kA8 ? smem + p.xc_offset : smem;
    const int raw_stride = kA8 ? p.max_len * kChunk : p.x_stride * 2;  // bytes per row of x
    const auto* src = static_cast<const unsigned char*>(p.x);
    for (int idx = threadIdx.x; idx < p.m * units; idx += kThreads) {
      const int tok = idx / units, i = (idx % units) * kPer;
      const int64_t kg = kbase + i;
      const bool in = kg < k;  // k is a multiple of kPer: a piece is wholly in or out
      cp_async16(raw + tok * raw_stride + i * kSize, src + (tok * k + (in ? kg : 0)) * kSize, in ? 16 : 0);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    for (int idx = threadIdx.x; idx < p.m * units; idx += kThreads) {
      const int tok = idx / units, i = (idx % units) * kPer;
      const uint4 v = *reinterpret_cast<const uint4*>(raw + tok * raw_stride + i * kSize);
      uint4* dst = reinterpret_cast<uint4*>(xs + size_t(tok) * p.x_stride + i);
      if constexpr (kA8) {
        const uint32_t q[4] = {v.x, v.y, v.z, v.w};
        uint32_t o[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          o[2 * j] = codes_to_f16x2(__byte_perm(q[j], 0, 0x4420));      // (b0, b2)
          o[2 * j + 1] = codes_to_f16x2(__byte_perm(q[j], 0, 0x4431));  // (b1, b3)
        }
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
      } else {  // in place: each piece is read and written by the same thread
        dst[0] = make_uint4(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.x, v.y, 0x7632),
                            __byte_perm(v.z, v.w, 0x5410), __byte_perm(v.z, v.w, 0x7632));
      }
    }
  } else {  // any k and alignment: one element at a time
    const int groups = klen / 4;
    for (int idx = threadIdx.x; idx < p.m * groups; idx += kThreads) {
      const int tok = idx / groups, i = (idx % groups) * 4;
      uint16_t e[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t kg = kbase + i + j;
        e[j] = 0;
        if (kg < k) {
          if constexpr (kA8) {
            e[j] = uint16_t(codes_to_f16x2(static_cast<const uint8_t*>(p.x)[tok * k + kg]) & 0xFFFF);
          } else {
            e[j] = __bfloat16_as_ushort(static_cast<const __nv_bfloat16*>(p.x)[tok * k + kg]);
          }
        }
      }
      uint16_t* dst = xs + size_t(tok) * p.x_stride + i;
      dst[0] = e[0];
      dst[1] = e[2];
      dst[2] = e[1];
      dst[3] = e[3];
    }
  }
}

// kA8: E4M3 activations (FP16 MMA) or BF16 ones (BF16 MMA); kMT: 8-row activation tiles (m ≤ 8·kMT);
// kPerBlock: a scale varies along K, so every 128-chunk's sum is scaled on its own;
// kVec: k % 16 == 0 and the weights 16-byte aligned (else byte loads).
template <bool kA8, int kMT, bool kPerBlock, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p) {
  constexpr int kStages = kMT == 1 ? 4 : 3;  // chunks in flight per warp (registers: 16 per chunk)
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ bool s_last;
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem);
  const float* xsc = reinterpret_cast<const float*>(smem + p.xsc_offset);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row_tiles = p.row_tiles, wcols = kWarps / row_tiles;
  const int rt = warp % row_tiles, wk = warp / row_tiles;
  const int64_t n = p.n, k = p.k;
  const int64_t cta_row0 = int64_t(blockIdx.x) * row_tiles * 16;
  const int64_t row0 = cta_row0 + rt * 16;
  const int split = blockIdx.y;
  const int cc0 = int(int64_t(split) * p.chunks / p.splits);
  const int cc1 = int(int64_t(split + 1) * p.chunks / p.splits);
  const int len = cc1 - cc0;
  const int wc0 = cc0 + wk * len / wcols;
  const int wc1 = row0 < n ? cc0 + (wk + 1) * len / wcols : wc0;  // rows past n: nothing to do

  const int64_t rowA = min(row0 + g, n - 1), rowB = min(row0 + g + 8, n - 1);
  const uint8_t* pa = p.w + rowA * k + 16 * t;
  const uint8_t* pb = p.w + rowB * k + 16 * t;
  const int64_t wblock_row = (min(row0, n - 1) / 128) * p.chunks;  // block scales: this tile's row

  // Weight pieces of kStages chunks: [stage][row g, row g + 8][u].
  uint4 wbuf[kStages][2][2];
  float swbuf[kStages];
  auto load = [&](int s, int c) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t kpos = int64_t(c) * kChunk + 64 * u + 16 * t;
      wbuf[s][0][u] = load_codes<kVec>(pa + int64_t(c) * kChunk + 64 * u, kpos, k);
      wbuf[s][1][u] = load_codes<kVec>(pb + int64_t(c) * kChunk + 64 * u, kpos, k);
    }
    if (kPerBlock && p.w_layout == kWBlock) swbuf[s] = __ldg(p.w_scale + wblock_row + c);
  };
  // Programmatic dependent launch: the next kernel's blocks may start as ours finish; they
  // wait (griddepcontrol.wait) for our results only where they read activations.
  asm volatile("griddepcontrol.launch_dependents;");
  // Start the weight stream (weights and their scales are constants) before waiting for the
  // previous kernel and staging the activations. Without a programmatic launch the wait is a no-op.
#pragma unroll
  for (int s = 0; s < kStages; ++s)
    if (wc0 + s < wc1) load(s, wc0 + s);
  asm volatile("griddepcontrol.wait;" ::: "memory");

  stage_x<kA8>(p, smem, int64_t(cc0) * kChunk, len * kChunk);
  if (p.x_layout == kXGroup) {
    float* dst = reinterpret_cast<float*>(smem + p.xsc_offset);
    for (int idx = threadIdx.x; idx < p.m * len; idx += kThreads) {
      const int tok = idx / len, j = idx % len;
      dst[tok * p.max_len + j] = p.x_scale[int64_t(tok) * p.chunks + cc0 + j];
    }
  }
  __syncthreads();

  // Scales that stay fixed along K.
  float sw_row[2] = {1.0f, 1.0f};  // rows g, g + 8
  if (p.w_layout == kWTensor) sw_row[0] = sw_row[1] = __ldg(p.w_scale);
  else if (p.w_layout == kWChannel) sw_row[0] = __ldg(p.w_scale + rowA), sw_row[1] = __ldg(p.w_scale + rowB);
  int tok_c[kMT][2];  // this lane's accumulator columns (clamped to real rows of x)
  float sx_tok[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      tok_c[mt][j] = min(8 * mt + 2 * t + j, p.m - 1);
      sx_tok[mt][j] = 1.0f;
      if (kA8 && p.x_layout == kXTensor) sx_tok[mt][j] = __ldg(p.x_scale);
      if (kA8 && p.x_layout == kXToken) sx_tok[mt][j] = __ldg(p.x_scale + tok_c[mt][j]);
    }

  float tot[kMT][4] = {};
  const uint16_t* xrow[kMT];
  bool has_tok[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    has_tok[mt] = 8 * mt + g < p.m;
    xrow[mt] = xs + size_t(min(8 * mt + g, p.m - 1)) * p.x_stride + 16 * t;
  }

  auto compute = [&](int s, int c) {
    float acc[kMT][4] = {};
    float(&sum)[kMT][4] = pick<kPerBlock>(acc, tot);  // per-chunk sums, or straight into the total
    const int xoff = (c - cc0) * kChunk;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      uint32_t bfr[kMT][8];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
        if (has_tok[mt]) {
          const uint4* src = reinterpret_cast<const uint4*>(xrow[mt] + xoff + 64 * u);
          v0 = src[0];
          v1 = src[1];
        }
        bfr[mt][0] = v0.x, bfr[mt][1] = v0.y, bfr[mt][2] = v0.z, bfr[mt][3] = v0.w;
        bfr[mt][4] = v1.x, bfr[mt][5] = v1.y, bfr[mt][6] = v1.z, bfr[mt][7] = v1.w;
      }
      const uint32_t wa[4] = {wbuf[s][0][u].x, wbuf[s][0][u].y, wbuf[s][0][u].z, wbuf[s][0][u].w};
      const uint32_t wb[4] = {wbuf[s][1][u].x, wbuf[s][1][u].y, wbuf[s][1][u].z, wbuf[s][1][u].w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t a0, a1, a2, a3;
        expand<kA8>(wa[q], a0, a2);
        expand<kA8>(wb[q], a1, a3);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) mma<kA8>(sum[mt], a0, a1, a2, a3, bfr[mt][2 * q], bfr[mt][2 * q + 1]);
      }
    }
    if constexpr (kPerBlock) {
      // This chunk's scales; the sum is scaled as the CPU does: ((Σ · s_x) · s_w).
      float sw[2] = {sw_row[0], sw_row[1]};
      if (p.w_layout == kWBlock) sw[0] = sw[1] = swbuf[s];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        float sx[2] = {sx_tok[mt][0], sx_tok[mt][1]};
        if (kA8 && p.x_layout == kXGroup) {
          sx[0] = xsc[tok_c[mt][0] * p.max_len + (c - cc0)];
          sx[1] = xsc[tok_c[mt][1] * p.max_len + (c - cc0)];
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float v = acc[mt][j];
          if constexpr (kA8) v = __fmul_rn(__fmul_rn(v, 256.0f), sx[j & 1]);
          tot[mt][j] = __fadd_rn(tot[mt][j], __fmul_rn(v, sw[j >> 1]));
        }
      }
    }
  };

  for (int c0 = wc0; c0 < wc1; c0 += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const int c = c0 + s;
      if (c < wc1) {
        compute(s, c);
        if (c + kStages < wc1) load(s, c + kStages);
      }
    }
  }
  if constexpr (!kPerBlock) {  // one scale for the whole range
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float v = tot[mt][j];
        if constexpr (kA8) v = __fmul_rn(__fmul_rn(v, 256.0f), sx_tok[mt][j & 1]);
        tot[mt][j] = __fmul_rn(v, sw_row[j >> 1]);
      }
  }

  // Warp partials → shared memory (reusing the activations' space), summed in warp-column order.
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);  // [warp][16 rows][16 columns]
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < 4; ++j) red[(warp * 16 + g + 8 * (j >> 1)) * 16 + 8 * mt + 2 * t + (j & 1)] = tot[mt][j];
  __syncthreads();

  const int cta_rows = row_tiles * 16;
  for (int idx = threadIdx.x; idx < p.m * cta_rows; idx += kThreads) {
    const int tok = idx / cta_rows, r = idx % cta_rows;
    const int64_t row = cta_row0 + r;
    if (row >= n) continue;
    float v = 0.0f;
    for (int c = 0; c < wcols; ++c) v = __fadd_rn(v, red[((c * row_tiles + r / 16) * 16 + r % 16) * 16 + tok]);
    if (p.splits == 1) {
      if (p.bias) v = __fadd_rn(v, __bfloat162float(p.bias[row]));
      p.y[tok * n + row] = __float2bfloat16_rn(v);
    } else {
      p.partial[(int64_t(split) * p.m + tok) * n + row] = v;
    }
  }
  if (p.splits == 1) return;

  // The last block of this row group to finish sums the splits in order.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(p.counters + blockIdx.x, 1u) == unsigned(p.splits - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int idx = threadIdx.x; idx < p.m * cta_rows; idx += kThreads) {
    const int tok = idx / cta_rows, r = idx % cta_rows;
    const int64_t row = cta_row0 + r;
    if (row >= n) continue;
    float v = 0.0f;
    for (int s = 0; s < p.splits; ++s) v = __fadd_rn(v, __ldcg(p.partial + (int64_t(s) * p.m + tok) * n + row));
    if (p.bias) v = __fadd_rn(v, __bfloat162float(p.bias[row]));
    p.y[tok * n + row] = __float2bfloat16_rn(v);
  }
  if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;  // ready for the next call
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int multiprocessors() {
  static std::atomic<int> cached[64] = {};
  int dev = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) dev = 0;
  int v = cached[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    FP8LM_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    cached[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

struct Layout {  // shared memory of one block
  int max_len, x_stride, xsc_offset, xc_offset;
  size_t bytes;
};

size_t align16(size_t v) { return (v + 15) / 16 * 16; }

// [x as 16-bit values, m rows][group scales (x_group)][raw codes (a8)]; the warps' partial
// sums reuse the start once the activations are no longer needed.
Layout smem_layout(int64_t m, int64_t chunks, int splits, bool x_group, bool a8) {
  Layout l{};
  l.max_len = int(cdiv(chunks, splits));
  l.x_stride = l.max_len * kChunk + kRowPadHalves;
  l.xsc_offset = int(align16(size_t(m) * size_t(l.x_stride) * 2));
  l.xc_offset = int(align16(size_t(l.xsc_offset) + (x_group ? size_t(m) * size_t(l.max_len) * 4 : 0)));
  const size_t staged = size_t(l.xc_offset) + (a8 ? size_t(m) * size_t(l.max_len) * kChunk : 0);
  const size_t red = size_t(kWarps) * 16 * 16 * 4;
  l.bytes = std::max(staged, red);
  return l;
}

Fp8GemvPlan clamp_plan(Fp8GemvPlan plan, int64_t chunks) {
  int rt = 1;
  while (rt * 2 <= std::min(plan.row_tiles, kWarps)) rt *= 2;
  plan.row_tiles = rt;
  plan.k_splits = int(std::clamp<int64_t>(plan.k_splits, 1, std::min<int64_t>(chunks, kMaxSplits)));
  return plan;
}

// The plan comes from a model fitted to measurements on the H200 (bench_cuda_gemv --sweep,
// docs/benchmarks.md): with at most 2 blocks resident per multiprocessor,
//   * DRAM streams ~3.8 TB/s once ≥ 1.2 blocks per multiprocessor are resident, less below;
//   * one multiprocessor streams at most ~40 GB/s, so the busiest one (ceil(blocks / SMs)
//     blocks) bounds the time; the two bounds combine as a smooth maximum;
//   * each extra wave of blocks costs ~1.5 µs of ramp, a K split ~1.5 µs (the last block's
//     fence, counter and reduction) plus its partials' bytes, staging x ~100 GB/s per SM.
double plan_cost_us(int64_t m, int64_t n, int64_t k, bool x_group, bool a8, int rt, int s, double sms) {
  const int64_t chunks = cdiv(k, kChunk);
  const int wcols = kWarps / rt;
  if (s > 1 && chunks / s < wcols) return -1;  // every warp gets a chunk
  const Layout l = smem_layout(m, chunks, s, x_group, a8);
  if (l.bytes > kSmemLimit) return -1;
  const double groups = double(cdiv(n, 16 * rt)), ctas = groups * s;
  const double rows_cta = double(std::min<int64_t>(n, 16 * rt));
  const double cta_bytes = rows_cta * double(std::min<int64_t>(k, int64_t(l.max_len) * kChunk));
  const double per_sm = std::ceil(ctas / sms);
  const double resident = std::min(ctas, 2.0 * sms);
  const double t_dram = double(n) * double(k) / (3.8e6 * std::min(1.0, resident / (1.2 * sms)));
  const double t_sm = per_sm * cta_bytes / 4.0e4;
  double t = std::pow(std::pow(t_dram, 4) + std::pow(t_sm, 4), 0.25);
  t += 1.5 * (std::ceil(ctas / (2.0 * sms)) - 1);
  if (s > 1) t += 1.5 + 2.0 * s * double(m) * double(n) * 4 / 3.8e6;
  t += per_sm * double(m) * l.max_len * kChunk * (a8 ? 1 : 2) / 1.0e5;
  return t;
}

Fp8GemvPlan choose_plan(int64_t m, int64_t n, int64_t k, bool x_group, bool a8) {
  const int64_t chunks = cdiv(k, kChunk);
  const double sms = multiprocessors();
  Fp8GemvPlan best{1, 1};
  double best_cost = std::numeric_limits<double>::infinity();
  for (int rt : {8, 4, 2, 1})
    for (int s = 1; s <= std::min<int64_t>(chunks, kMaxSplits); ++s) {
      const double c = plan_cost_us(m, n, k, x_group, a8, rt, s, sms);
      if (c >= 0 && c < best_cost) best_cost = c, best = {rt, s};
    }
  return best;
}

void validate(const Fp8GemvArgs& a) {
  auto fail = [](const std::string& what) { throw Error("fp8_gemv: " + what); };
  if (a.m < 1 || a.m > kMaxGemvRows)
    fail("m = " + std::to_string(a.m) + " is outside 1.." + std::to_string(kMaxGemvRows) +
         " (larger batches go to the GEMM)");
  if (a.n < 1 || a.k < 1) fail("weight shape [" + std::to_string(a.n) + ", " + std::to_string(a.k) + "] must be positive");
  if (a.n > std::numeric_limits<int>::max()) fail("n = " + std::to_string(a.n) + " is too large");
  if (a.w == nullptr || a.w_scale == nullptr) fail("weights or weight scales missing");
  if (a.y == nullptr) fail("output y missing");
  if (int(a.w_layout) > kWBlock) fail("unknown weight scale layout");
  const bool a16 = a.x != nullptr, a8 = a.x_codes != nullptr;
  if (a16 == a8) fail("give exactly one of x (BF16, W8A16) and x_codes (E4M3, W8A8)");
  if (a16 && a.x_layout != ActivationScaleLayout::kNone)
    fail("BF16 activations take no scales (x_layout must be kNone)");
  if (a8 && (a.x_layout == ActivationScaleLayout::kNone || int(a.x_layout) > kXGroup))
    fail("E4M3 activations need x_layout kTensor, kToken or kGroup128");
  if (a8 && a.x_scale == nullptr) fail("E4M3 activations need x_scale");
}

template <bool kA8, int kMT, bool kPerBlock, bool kVec>
void launch(const Params& p, dim3 grid, size_t smem, cudaStream_t stream) {
  auto kernel = gemv_kernel<kA8, kMT, kPerBlock, kVec>;
  // More than 48 KB of dynamic shared memory needs an opt-in, once per device.
  static std::atomic<uint64_t> configured{0};
  int dev = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if ((configured.load(std::memory_order_acquire) & bit) == 0) {
    FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemLimit)));
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.pdl ? 1 : 0;
  FP8LM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <bool kA8, int kMT>
void launch_mt(const Params& p, dim3 grid, size_t smem, cudaStream_t stream, bool per_block, bool vec) {
  if (per_block) {
    if (vec) launch<kA8, kMT, true, true>(p, grid, smem, stream);
    else launch<kA8, kMT, true, false>(p, grid, smem, stream);
  } else {
    if (vec) launch<kA8, kMT, false, true>(p, grid, smem, stream);
    else launch<kA8, kMT, false, false>(p, grid, smem, stream);
  }
}

Fp8GemvPlan resolve_plan(const Fp8GemvArgs& a, const Fp8GemvPlan* plan) {
  const int64_t chunks = cdiv(a.k, kChunk);
  const bool x_group = a.x_codes != nullptr && a.x_layout == ActivationScaleLayout::kGroup128;
  Fp8GemvPlan p = plan ? clamp_plan(*plan, chunks) : choose_plan(a.m, a.n, a.k, x_group, a.x_codes != nullptr);
  // Shared memory bounds the K range of one block: split further if needed.
  while (smem_layout(a.m, chunks, p.k_splits, x_group, a.x_codes != nullptr).bytes > kSmemLimit && p.k_splits < chunks)
    ++p.k_splits;
  // Split K needs a counter per row group: very tall weights use taller blocks instead.
  while (p.k_splits > 1 && cdiv(a.n, 16 * p.row_tiles) > kCounterSlots && p.row_tiles < kWarps) p.row_tiles *= 2;
  if (cdiv(a.n, 16 * p.row_tiles) > kCounterSlots) p.k_splits = 1;
  return p;
}

// Workspace: [kCounterSlots counters][partials]. The counters sit at the same place for every
// call, so calls of any shape can share one workspace: each call's last block resets the
// counters it used, and no call's partials ever land on them.
size_t workspace_for(const Fp8GemvArgs& a, const Fp8GemvPlan& p) {
  if (p.k_splits == 1) return 0;
  return kCounterBytes + size_t(p.k_splits) * size_t(a.m) * size_t(a.n) * 4;
}

}  // namespace

Fp8GemvPlan fp8_gemv_plan(const Fp8GemvArgs& a) {
  validate(a);
  return resolve_plan(a, nullptr);
}

size_t fp8_gemv_workspace_bytes(const Fp8GemvArgs& a, const Fp8GemvPlan* plan) {
  validate(a);
  return workspace_for(a, resolve_plan(a, plan));
}

void fp8_gemv(const Fp8GemvArgs& a, cudaStream_t stream, const Fp8GemvPlan* plan) {
  validate(a);
  const Fp8GemvPlan pl = resolve_plan(a, plan);
  const size_t need = workspace_for(a, pl);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need))
    throw Error("fp8_gemv: needs a zero-filled workspace of " + std::to_string(need) +
                " bytes (fp8_gemv_workspace_bytes), got " + std::to_string(a.workspace ? a.workspace_bytes : 0));
  const bool a8 = a.x_codes != nullptr;
  const int64_t chunks = cdiv(a.k, kChunk);
  const bool x_group = a8 && a.x_layout == ActivationScaleLayout::kGroup128;
  const Layout l = smem_layout(a.m, chunks, pl.k_splits, x_group, a8);
  if (l.bytes > kSmemLimit) throw Error("fp8_gemv: k = " + std::to_string(a.k) + " needs too much shared memory");

  Params p{};
  p.m = int(a.m);
  p.n = int(a.n);
  p.k = a.k;
  p.chunks = int(chunks);
  p.row_tiles = pl.row_tiles;
  p.splits = pl.k_splits;
  p.max_len = l.max_len;
  p.x_stride = l.x_stride;
  p.xsc_offset = l.xsc_offset;
  p.xc_offset = l.xc_offset;
  p.w = a.w;
  p.w_scale = a.w_scale;
  p.w_layout = int(a.w_layout);
  p.x = a8 ? static_cast<const void*>(a.x_codes) : static_cast<const void*>(a.x);
  p.x_scale = a.x_scale;
  p.x_layout = int(a.x_layout);
  const auto addr = reinterpret_cast<uintptr_t>(p.x);
  p.x_vec = addr % 16 == 0 && a.k % (a8 ? 16 : 8) == 0;
  p.bias = a.bias;
  p.y = a.y;
  p.pdl = a.programmatic_launch;
  if (pl.k_splits > 1) {
    auto* ws = static_cast<unsigned char*>(a.workspace);
    p.counters = reinterpret_cast<unsigned*>(ws);
    p.partial = reinterpret_cast<float*>(ws + kCounterBytes);
  }
  const bool per_block = a.w_layout == WeightScaleLayout::kBlock128 || x_group;
  const bool vec = a.k % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
  const dim3 grid(unsigned(cdiv(a.n, 16 * pl.row_tiles)), unsigned(pl.k_splits));
  const int mt = a.m > 8 ? 2 : 1;
  if (a8) {
    if (mt == 1) launch_mt<true, 1>(p, grid, l.bytes, stream, per_block, vec);
    else launch_mt<true, 2>(p, grid, l.bytes, stream, per_block, vec);
  } else {
    if (mt == 1) launch_mt<false, 1>(p, grid, l.bytes, stream, per_block, vec);
    else launch_mt<false, 2>(p, grid, l.bytes, stream, per_block, vec);
  }
}

}  // namespace fp8lm::cuda
