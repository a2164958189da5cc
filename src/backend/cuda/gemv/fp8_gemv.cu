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
#include "backend/cuda/gemv/fp8_gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/launch.cuh"
#include "backend/cuda/gemv/mma_fragments.cuh"
#include "backend/cuda/quant/quantize_device.cuh"
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

// 64-byte aligned: at its natural 8 bytes ptxas compiles the W8A8 kernels for m <= 8 with 121
// registers instead of 125, and bench latency FP8 at batch 8 ran 2.8 % slower on the H100 (the
// GEMVs 2-8 %; issue 40, docs/results/issue40/README.md). The retired bulk kernel's CUtensorMap
// member had given Params this alignment.
struct alignas(64) Params {
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
  bool quant;    // BF16 activations quantized to E4M3 while staged (Fp8GemvArgs::quantize_x)
  Fp8ScaleRule rule;  // quant, dynamic scales
  bool pdl;      // launched as a programmatic dependent of the previous kernel
  const __nv_bfloat16* bias;
  __nv_bfloat16* y;
  float* partial;      // [splits, split_rows, n]
  unsigned* counters;  // [row groups]
  int64_t split_rows;  // rows of each split's partials: m (grouped: every grouped row)
  int counter_base;    // this call's first counter (grouped: the slot's)
  // Grouped launches (fp8_gemv_grouped): blockIdx.z is a slot of `slots`; bind_slot points the
  // fields above at its expert's weights and rows.
  const int32_t* x_rows;  // row tok of the staged x is row x_rows[tok] of x (null: row tok)
  const int32_t* slots;   // [count | expert[max_slots] | first[max_slots] | rows[max_slots]]
  int max_slots;
  const uint8_t* const* w_table;
  const float* const* w_scale_table;
  const __nv_bfloat16* const* bias_table;
};

constexpr int kWTensor = int(WeightScaleLayout::kTensor);
constexpr int kWChannel = int(WeightScaleLayout::kChannel);
constexpr int kWBlock = int(WeightScaleLayout::kBlock128);
constexpr int kXTensor = int(ActivationScaleLayout::kTensor);
constexpr int kXToken = int(ActivationScaleLayout::kToken);
constexpr int kXGroup = int(ActivationScaleLayout::kGroup128);

// The row of x (and of its token / group scales) that staged row `tok` reads.
__device__ __forceinline__ int64_t src_row(const Params& p, int tok) { return p.x_rows ? p.x_rows[tok] : tok; }

// The block's barrier as an asm statement with a memory clobber (the compiler moves no memory
// access across it), as the kernels were measured with.
__device__ __forceinline__ void block_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

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
      cp_async16(raw + tok * raw_stride + i * kSize, src + (src_row(p, tok) * k + (in ? kg : 0)) * kSize, in ? 16 : 0);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    block_sync();
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
            e[j] = uint16_t(codes_to_f16x2(static_cast<const uint8_t*>(p.x)[src_row(p, tok) * k + kg]) & 0xFFFF);
          } else {
            e[j] = __bfloat16_as_ushort(static_cast<const __nv_bfloat16*>(p.x)[src_row(p, tok) * k + kg]);
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

// 8 BF16 activations x[tok, kg … kg + 7] as floats, zeros past k. A plain load: x was
// written by the kernel before (visible after griddepcontrol.wait), so not through the
// read-only path.
__device__ __forceinline__ void load_x8(const Params& p, int tok, int64_t kg, float (&v)[8]) {
  const int n = int(max(int64_t(0), min(int64_t(8), p.k - kg)));  // elements of the row here
  const auto* x = static_cast<const uint16_t*>(p.x) + src_row(p, tok) * p.k + kg;
  // x_vec: k % 8 == 0 and x 16-byte aligned, so a vector is wholly in or past the row.
  if (p.x_vec && n == 8) load8<true>(x, 8, v);
  else load8<false>(x, n, v);
}

// Quantize-while-staging (p.quant): the block's K range of BF16 x becomes E4M3 codes,
// stored as their exact FP16 values in stage_x's permuted layout, with the scales of
// quantize_fp8_dynamic / _static (quantize_device.cuh): per token or per tensor from the
// amax of whole rows (every block reads them: K·m BF16 values from L2), per 1 × 128 group
// from the chunk itself (written to the group-scale area as stage_x's caller does), or the
// static scale. `tok_scale` (shared, one per row of x) receives the row scales.
__device__ void stage_x_quantized(const Params& p, unsigned char* smem, int cc0, int len, float* tok_scale,
                                  unsigned* tok_amax) {
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem);
  float* group_scale = reinterpret_cast<float*>(smem + p.xsc_offset);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool group = p.x_layout == kXGroup;
  const bool dynamic_rows = !group && p.x_scale == nullptr;
  if (dynamic_rows) {
    // Row amaxes: consecutive vectors of a row go to consecutive threads; each thread
    // folds its run of one row and flushes when the row changes (max is order-free).
    if (threadIdx.x < kMaxGemvRows) tok_amax[threadIdx.x] = 0;
    block_sync();
    const int nv = int((p.k + 7) / 8);
    const int total = p.m * nv;
    int cur = -1;
    float a = 0.0f;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < total; idx += kThreads) {
      const int tok = idx / nv;
      float v[8];
      load_x8(p, tok, int64_t(idx - tok * nv) * 8, v);
      if (tok != cur) {
        if (cur >= 0) atomicMax(tok_amax + cur, __float_as_uint(a));
        cur = tok;
        a = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(v[j]));  // fmaxf skips NaN
    }
    if (cur >= 0) atomicMax(tok_amax + cur, __float_as_uint(a));
    block_sync();
  }
  if (!group && threadIdx.x < p.m) {
    float s;
    if (!dynamic_rows) {
      s = __ldg(p.x_scale);  // static per-tensor
    } else {
      float a = __uint_as_float(tok_amax[threadIdx.x]);
      if (p.x_layout == kXTensor)
        for (int t = 0; t < p.m; ++t) a = fmaxf(a, __uint_as_float(tok_amax[t]));
      s = scale_from_amax(a, p.rule);
    }
    tok_scale[threadIdx.x] = s;
  }
  block_sync();

  // A warp takes two chunks of one row at a time (lanes 0–15 the first, 16–31 the second,
  // 8 values each), loading two such units before converting them.
  const int half = lane >> 4, hl = lane & 15;
  const int cpairs = (len + 1) / 2;
  const int units = p.m * cpairs;
  constexpr int kBatch = 2;
  for (int u0 = warp; u0 < units; u0 += kWarps * kBatch) {
    float v[kBatch][8];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int u = u0 + i * kWarps;
      const int tok = u / cpairs, j = 2 * (u % cpairs) + half;
      if (u < units && j < len) {
        load_x8(p, tok, int64_t(cc0 + j) * kChunk + hl * 8, v[i]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[i][e] = 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int u = u0 + i * kWarps;
      if (u >= units) break;  // the same for the whole warp
      const int tok = u / cpairs, j = 2 * (u % cpairs) + half;
      float s;
      if (group) {  // the chunk is the group: 16 lanes × 8 values
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) a = fmaxf(a, fabsf(v[i][e]));
        for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
        s = scale_from_amax(a, p.rule);
        if (hl == 0 && j < len) group_scale[tok * p.max_len + j] = s;
      } else {
        s = tok_scale[tok];
      }
      if (j < len) {
        const uint2 c = quantize8(v[i], s, Fp8Format::kE4M3);
        *reinterpret_cast<uint4*>(xs + size_t(tok) * p.x_stride + j * kChunk + hl * 8) =
            make_uint4(codes_to_f16x2(__byte_perm(c.x, 0, 0x4420)), codes_to_f16x2(__byte_perm(c.x, 0, 0x4431)),
                       codes_to_f16x2(__byte_perm(c.y, 0, 0x4420)), codes_to_f16x2(__byte_perm(c.y, 0, 0x4431)));
      }
    }
  }
}

// ---- Staging, the per-warp arithmetic, the split-K sum -------------------------------------

// Stages the activations of K chunks [cc0, cc0 + len) at `xb` (stage_x or, quantizing,
// stage_x_quantized; group scales given with E4M3 codes are copied beside them). Ends with
// the block synchronized.
template <bool kA8>
__device__ void stage_item(const Params& p, unsigned char* xb, int cc0, int len, float* tok_scale,
                           unsigned* tok_amax) {
  if (kA8 && p.quant) {
    stage_x_quantized(p, xb, cc0, len, tok_scale, tok_amax);
  } else {
    stage_x<kA8>(p, xb, int64_t(cc0) * kChunk, len * kChunk);
  }
  if (p.x_layout == kXGroup && !p.quant) {
    float* dst = reinterpret_cast<float*>(xb + p.xsc_offset);
    for (int idx = threadIdx.x; idx < p.m * len; idx += kThreads) {
      const int tok = idx / len, j = idx % len;
      dst[tok * p.max_len + j] = p.x_scale[src_row(p, tok) * p.chunks + cc0 + j];
    }
  }
  block_sync();
}

// What a lane needs to multiply a 16-row weight tile (rows rowA = row0 + g, rowB = row0 + g + 8)
// by the staged activations: the scales fixed along K and where its activation columns are.
template <bool kA8, int kMT>
struct TileScales {
  float sw_row[2];      // weight scales of rows g, g + 8 (tensor / channel; 1 for block)
  int tok_c[kMT][2];    // this lane's accumulator columns (clamped to real rows of x)
  float sx_tok[kMT][2];
  const uint16_t* xrow[kMT];
  bool has_tok[kMT];

  __device__ __forceinline__ TileScales(const Params& p, const uint16_t* xs, int64_t rowA, int64_t rowB, int g, int t,
                                        const float* tok_scale) {
    sw_row[0] = sw_row[1] = 1.0f;
    if (p.w_layout == kWTensor) sw_row[0] = sw_row[1] = __ldg(p.w_scale);
    else if (p.w_layout == kWChannel) sw_row[0] = __ldg(p.w_scale + rowA), sw_row[1] = __ldg(p.w_scale + rowB);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        tok_c[mt][j] = min(8 * mt + 2 * t + j, p.m - 1);
        sx_tok[mt][j] = 1.0f;
        if (kA8 && p.quant && p.x_layout != kXGroup) sx_tok[mt][j] = tok_scale[tok_c[mt][j]];
        else if (kA8 && p.x_layout == kXTensor) sx_tok[mt][j] = __ldg(p.x_scale);
        else if (kA8 && p.x_layout == kXToken) sx_tok[mt][j] = __ldg(p.x_scale + src_row(p, tok_c[mt][j]));
      }
      has_tok[mt] = 8 * mt + g < p.m;
      xrow[mt] = xs + size_t(min(8 * mt + g, p.m - 1)) * p.x_stride + 16 * t;
    }
  }
};

// sum += this 16-row × 128-K chunk of weights (w: [row g, row g + 8][u], the lane's pieces)
// times the staged activations at xoff.
template <bool kA8, int kMT>
__device__ __forceinline__ void mma_chunk(float (&sum)[kMT][4], const uint4 (&w)[2][2], const TileScales<kA8, kMT>& ts,
                                          int xoff) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    uint32_t bfr[kMT][8];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
      if (ts.has_tok[mt]) {
        const uint4* src = reinterpret_cast<const uint4*>(ts.xrow[mt] + xoff + 64 * u);
        v0 = src[0];
        v1 = src[1];
      }
      bfr[mt][0] = v0.x, bfr[mt][1] = v0.y, bfr[mt][2] = v0.z, bfr[mt][3] = v0.w;
      bfr[mt][4] = v1.x, bfr[mt][5] = v1.y, bfr[mt][6] = v1.z, bfr[mt][7] = v1.w;
    }
    const uint32_t wa[4] = {w[0][u].x, w[0][u].y, w[0][u].z, w[0][u].w};
    const uint32_t wb[4] = {w[1][u].x, w[1][u].y, w[1][u].z, w[1][u].w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t a0, a1, a2, a3;
      expand<kA8>(wa[q], a0, a2);
      expand<kA8>(wb[q], a1, a3);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mma<kA8>(sum[mt], a0, a1, a2, a3, bfr[mt][2 * q], bfr[mt][2 * q + 1]);
    }
  }
}

// A chunk's own sum scaled as the CPU does, ((Σ · s_x) · s_w), into the total. `sw_block`:
// the chunk's block scale (block layout); `xsc`: staged group scales, column j of the item.
template <bool kA8, int kMT>
__device__ __forceinline__ void fold_chunk(float (&tot)[kMT][4], const float (&acc)[kMT][4], const Params& p,
                                           const TileScales<kA8, kMT>& ts, float sw_block, const float* xsc, int j) {
  float sw[2] = {ts.sw_row[0], ts.sw_row[1]};
  if (p.w_layout == kWBlock) sw[0] = sw[1] = sw_block;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    float sx[2] = {ts.sx_tok[mt][0], ts.sx_tok[mt][1]};
    if (kA8 && p.x_layout == kXGroup) {
      sx[0] = xsc[ts.tok_c[mt][0] * p.max_len + j];
      sx[1] = xsc[ts.tok_c[mt][1] * p.max_len + j];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = acc[mt][i];
      if constexpr (kA8) v = __fmul_rn(__fmul_rn(v, 256.0f), sx[i & 1]);
      tot[mt][i] = __fadd_rn(tot[mt][i], __fmul_rn(v, sw[i >> 1]));
    }
  }
}

// One scale for the whole range: the total scaled once at the end.
template <bool kA8, int kMT>
__device__ __forceinline__ void scale_total(float (&tot)[kMT][4], const TileScales<kA8, kMT>& ts) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = tot[mt][i];
      if constexpr (kA8) v = __fmul_rn(__fmul_rn(v, 256.0f), ts.sx_tok[mt][i & 1]);
      tot[mt][i] = __fmul_rn(v, ts.sw_row[i >> 1]);
    }
}

// Split K: the last of a row group's blocks to finish (a counter per group, not atomics on
// data) sums the partials in split order, adds the bias and writes y. Called by every
// thread once the block's partials for rows [row0, row0 + rows) are written.
__device__ void finish_splits(const Params& p, int group, int64_t row0, int rows, bool* s_last) {
  __threadfence();
  block_sync();
  if (threadIdx.x == 0) *s_last = atomicAdd(p.counters + p.counter_base + group, 1u) == unsigned(p.splits - 1);
  block_sync();
  if (!*s_last) return;
  __threadfence();
  for (int idx = threadIdx.x; idx < p.m * rows; idx += kThreads) {
    const int tok = idx / rows;
    const int64_t row = row0 + idx % rows;
    if (row >= p.n) continue;
    float v = 0.0f;
    for (int s = 0; s < p.splits; ++s) v = __fadd_rn(v, __ldcg(p.partial + (int64_t(s) * p.split_rows + tok) * p.n + row));
    if (p.bias) v = __fadd_rn(v, __bfloat162float(p.bias[row]));
    p.y[tok * p.n + row] = __float2bfloat16_rn(v);
  }
  if (threadIdx.x == 0) p.counters[p.counter_base + group] = 0;  // ready for the next call
}

// ---- The kernels -----------------------------------------------------------------------------

// kA8: E4M3 activations (FP16 MMA) or BF16 ones (BF16 MMA); kMT: 8-row activation tiles (m ≤ 8·kMT);
// kPerBlock: a scale varies along K, so every 128-chunk's sum is scaled on its own;
// kVec: k % 16 == 0 and the weights 16-byte aligned (else byte loads).
template <bool kA8, int kMT, bool kPerBlock, bool kVec>
__device__ __forceinline__ void gemv_body(const Params& p) {
  constexpr int kStages = kMT == 1 ? 4 : 3;  // chunks in flight per warp (registers: 16 per chunk)
  // 128-byte aligned, as it was measured (the retired bulk kernel's declaration had set it for
  // every kernel of this file).
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ bool s_last;
  __shared__ float s_tok_scale[kMaxGemvRows];  // quantize-while-staging: the row scales
  __shared__ unsigned s_tok_amax[kMaxGemvRows];
  const uint16_t* xs = reinterpret_cast<const uint16_t*>(smem);
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
  pdl_release();
  // Start the weight stream (weights and their scales are constants) before waiting for the
  // previous kernel and staging the activations. Without a programmatic launch the wait is a no-op.
#pragma unroll
  for (int s = 0; s < kStages; ++s)
    if (wc0 + s < wc1) load(s, wc0 + s);
  pdl_wait();

  stage_item<kA8>(p, smem, cc0, len, s_tok_scale, s_tok_amax);
  const TileScales<kA8, kMT> ts(p, xs, rowA, rowB, g, t, s_tok_scale);

  float tot[kMT][4] = {};
  auto compute = [&](int s, int c) {
    if constexpr (kPerBlock) {
      float acc[kMT][4] = {};
      mma_chunk<kA8, kMT>(acc, wbuf[s], ts, (c - cc0) * kChunk);
      fold_chunk<kA8, kMT>(tot, acc, p, ts, swbuf[s], xsc, c - cc0);
    } else {
      mma_chunk<kA8, kMT>(tot, wbuf[s], ts, (c - cc0) * kChunk);
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
  if constexpr (!kPerBlock) scale_total<kA8, kMT>(tot, ts);

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
      p.partial[(int64_t(split) * p.split_rows + tok) * n + row] = v;
    }
  }
  if (p.splits == 1) return;
  finish_splits(p, int(blockIdx.x), cta_row0, cta_rows, &s_last);
}

template <bool kA8, int kMT, bool kPerBlock, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Params p) {
  gemv_body<kA8, kMT, kPerBlock, kVec>(p);
}

// Points a grouped launch's parameters at slot blockIdx.z: its expert's weights, scales and
// bias, its rows of the grouped output (and of the partials), and its rows of x — through
// x_rows, or the slot's own rows of an x already in grouped order. False: an unused slot.
template <bool kA8>
__device__ __forceinline__ bool bind_slot(Params& q) {
  const int s = int(blockIdx.z);
  if (s >= q.slots[0]) return false;
  const int e = q.slots[1 + s], first = q.slots[1 + q.max_slots + s];
  q.m = q.slots[1 + 2 * q.max_slots + s];
  q.w = q.w_table[e];
  q.w_scale = q.w_scale_table[e];
  q.bias = q.bias_table != nullptr ? q.bias_table[e] : nullptr;
  q.y += int64_t(first) * q.n;
  if (q.partial != nullptr) q.partial += int64_t(first) * q.n;
  q.counter_base = s * int(gridDim.x);
  if (q.x_rows != nullptr) {
    q.x_rows += first;
  } else {
    const bool codes = kA8 && !q.quant;
    q.x = static_cast<const unsigned char*>(q.x) + int64_t(first) * q.k * (codes ? 1 : 2);
    if (q.x_layout == kXToken && !q.quant) q.x_scale += first;
    if (q.x_layout == kXGroup && !q.quant) q.x_scale += int64_t(first) * q.chunks;
  }
  return true;
}

// The grouped form: the slot table comes from the kernel before, so the wait comes first
// (no weight prefetch ahead of it: which weights is not known until then).
template <bool kA8, int kMT, bool kPerBlock>
__global__ void __launch_bounds__(kThreads, 2) gemv_grouped_kernel(const Params p) {
  pdl_release();
  pdl_wait();
  Params q = p;
  if (!bind_slot<kA8>(q)) return;
  gemv_body<kA8, kMT, kPerBlock, true>(q);
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

// The plan comes from a model fitted to measurements on the H200: every plan of the Llama-3.1-8B
// shapes at m = 1, 2, 4, 8, launched as the engine launches them (PDL; x quantized while staged
// for m ≤ 2), `bench_cuda_gemv --fit`, fitted by tools/fit_gemv_plan.py (docs/benchmarks.md,
// issue 18's third round). With at most 2 blocks resident per multiprocessor:
//   * DRAM streams ~4.4 TB/s once ≥ 1.56 blocks per multiprocessor are resident, less below;
//   * the busiest multiprocessor (ceil(blocks / SMs) blocks) streams ~137 GB/s; the fit adds
//     the two bounds (the smooth maximum it started from went to a sum);
//   * each wave of blocks beyond the first costs ~2.8 µs, a K split ~4.9 µs (the last block's
//     fence, counter and reduction) plus its partials' bytes; staging x ~18.7 GB/s per
//     multiprocessor, and quantizing it while staging (`quant`: each block first reads x's
//     whole rows for their scales) ~42.7 GB/s.
double plan_cost_us(int64_t m, int64_t n, int64_t k, bool x_group, bool a8, bool quant, int rt, int s, double sms) {
  const int64_t chunks = cdiv(k, kChunk);
  const int wcols = kWarps / rt;
  if (s > 1 && chunks / s < wcols) return -1;  // every warp gets a chunk
  const Layout l = smem_layout(m, chunks, s, x_group, a8);
  if (l.bytes > kSmemLimit) return -1;
  constexpr double kDram = 4.40e6, kResident = 1.56, kSm = 1.37e5, kWave = 2.8, kSplit = 4.9;
  constexpr double kStage = 1.87e4, kQuant = 4.27e4;  // bytes per µs
  const double groups = double(cdiv(n, 16 * rt)), ctas = groups * s;
  const double rows_cta = double(std::min<int64_t>(n, 16 * rt));
  const double cta_bytes = rows_cta * double(std::min<int64_t>(k, int64_t(l.max_len) * kChunk));
  const double per_sm = std::ceil(ctas / sms);
  const double resident = std::min(ctas, 2.0 * sms);
  const double t_dram = double(n) * double(k) / (kDram * std::min(1.0, resident / (kResident * sms)));
  const double t_sm = per_sm * cta_bytes / kSm;
  double t = t_dram + t_sm;
  t += kWave * (std::ceil(ctas / (2.0 * sms)) - 1);
  if (s > 1) t += kSplit + 2.0 * s * double(m) * double(n) * 4 / kDram;
  t += per_sm * double(m) * l.max_len * kChunk * (a8 ? 1 : 2) / kStage;
  if (quant) t += per_sm * double(m) * double(k) * 2 / kQuant;
  return t;
}

// Where the model's plan measured ≥ 3 % slower than the fastest plan of the case, the measured
// plan (the engine's Llama-3.1-8B shapes: docs/benchmarks.md, issue 18's third round). Plans
// depend on the multiprocessor count: the table holds for the 132 it was measured on.
struct MeasuredPlan {
  int64_t n, k, m;
  bool x_group, a8, quant;
  int row_tiles, k_splits;
};
constexpr int kMeasuredSms = 132;
// bench_cuda_gemv --fit on NVIDIA H200 (132 SMs), tools/fit_gemv_plan.py --table: {n, k, m, x_group, a8, quant, row_tiles, k_splits}
constexpr MeasuredPlan kMeasuredPlans[] = {
    {6144, 4096, 2, true, false, true, 8, 5},     // qkv_proj m=2 block128: 12.3 vs 13.4 us
    {4096, 4096, 2, false, false, true, 4, 4},    // o_proj m=2 channel: 11.0 vs 11.4 us
    {4096, 4096, 2, true, false, true, 8, 8},     // o_proj m=2 block128: 9.6 vs 10.8 us
    {4096, 14336, 1, false, false, true, 8, 8},   // down_proj m=1 channel: 23.3 vs 25.2 us
    {4096, 14336, 4, false, true, false, 4, 4},   // down_proj m=4 channel: 20.6 vs 21.6 us
    {4096, 14336, 8, false, true, false, 4, 4},   // down_proj m=8 channel: 22.1 vs 23.6 us
    {4096, 14336, 1, true, false, true, 8, 8},    // down_proj m=1 block128: 21.1 vs 25.1 us
    {4096, 14336, 4, true, true, false, 4, 4},    // down_proj m=4 block128: 21.5 vs 22.6 us
    {4096, 14336, 8, true, true, false, 4, 4},    // down_proj m=8 block128: 23.1 vs 24.8 us
    // Llama-3.1-70B (bench_cuda_gemv --fit --70b), where this model's choice measured ≥ 3 % slower:
    {8192, 8192, 2, false, false, true, 8, 4},    // o_proj m=2 channel: 26.7 vs 28.9 us
    {8192, 8192, 8, false, true, false, 4, 2},    // o_proj m=8 channel: 24.6 vs 25.4 us
    {8192, 8192, 1, true, false, true, 8, 4},     // o_proj m=1 block128: 22.8 vs 24.2 us
    {8192, 8192, 2, true, false, true, 8, 4},     // o_proj m=2 block128: 23.9 vs 28.2 us
    {8192, 8192, 4, true, true, false, 4, 2},     // o_proj m=4 block128: 23.9 vs 25.3 us
    {57344, 8192, 4, true, true, false, 8, 2},    // gate_up_proj m=4 block128: 142.2 vs 156.7 us
    {57344, 8192, 8, true, true, false, 8, 4},    // gate_up_proj m=8 block128: 155.9 vs 162.5 us
    {8192, 28672, 1, false, false, true, 8, 4},   // down_proj m=1 channel: 71.3 vs 77.1 us
    {8192, 28672, 1, true, false, true, 8, 4},    // down_proj m=1 block128: 68.5 vs 77.8 us
};

Fp8GemvPlan choose_plan(int64_t m, int64_t n, int64_t k, bool x_group, bool a8, bool quant) {
  const int64_t chunks = cdiv(k, kChunk);
  const double sms = multiprocessors();
  if (int(sms) == kMeasuredSms)
    for (const MeasuredPlan& e : kMeasuredPlans)
      if (e.n == n && e.k == k && e.m == m && e.x_group == x_group && e.a8 == a8 && e.quant == quant)
        return {e.row_tiles, e.k_splits};
  Fp8GemvPlan best{1, 1};
  double best_cost = std::numeric_limits<double>::infinity();
  for (int rt : {8, 4, 2, 1})
    for (int s = 1; s <= std::min<int64_t>(chunks, kMaxSplits); ++s) {
      const double c = plan_cost_us(m, n, k, x_group, a8, quant, rt, s, sms);
      if (c >= 0 && c < best_cost) best_cost = c, best = {rt, s};
    }
  return best;
}

void validate(const Fp8GemvArgs& a, bool grouped = false) {
  auto fail = [](const std::string& what) { throw Error("fp8_gemv: " + what); };
  if (a.m < 1 || a.m > kMaxGemvRows)
    fail("m = " + std::to_string(a.m) + " is outside 1.." + std::to_string(kMaxGemvRows) +
         " (larger batches go to the GEMM)");
  if (a.n < 1 || a.k < 1) fail("weight shape [" + std::to_string(a.n) + ", " + std::to_string(a.k) + "] must be positive");
  if (a.n > std::numeric_limits<int>::max()) fail("n = " + std::to_string(a.n) + " is too large");
  if (!grouped && (a.w == nullptr || a.w_scale == nullptr)) fail("weights or weight scales missing");
  if (a.y == nullptr) fail("output y missing");
  if (int(a.w_layout) > kWBlock) fail("unknown weight scale layout");
  const bool a16 = a.x != nullptr, a8 = a.x_codes != nullptr;
  if (a16 == a8) fail("give exactly one of x (BF16, W8A16 or quantize_x) and x_codes (E4M3, W8A8)");
  if (a.quantize_x) {
    if (!a16) fail("quantize_x quantizes BF16 x: give x, not x_codes");
    if (a.x_layout == ActivationScaleLayout::kNone || int(a.x_layout) > kXGroup)
      fail("quantize_x needs x_layout kTensor, kToken or kGroup128");
    if (a.x_scale != nullptr && a.x_layout != ActivationScaleLayout::kTensor)
      fail("quantize_x: a static scale (x_scale) is per-tensor only; token and group scales are dynamic");
    if (!(a.x_rule.fmax > 0.0f) || !(a.x_rule.amax_floor >= 0.0f) || !(a.x_rule.scale_floor >= 0.0f) ||
        !(a.x_rule.scale_cap >= 0.0f))
      fail("quantize_x: the scale rule needs fmax > 0 and floors and cap >= 0");
    return;
  }
  if (a16 && a.x_layout != ActivationScaleLayout::kNone)
    fail("BF16 activations take no scales (x_layout must be kNone)");
  if (a8 && (a.x_layout == ActivationScaleLayout::kNone || int(a.x_layout) > kXGroup))
    fail("E4M3 activations need x_layout kTensor, kToken or kGroup128");
  if (a8 && a.x_scale == nullptr) fail("E4M3 activations need x_scale");
}

// Launches `kernel` (opting it in, once per device, to kSmemLimit bytes of dynamic shared
// memory: more than 48 KB needs it), as a programmatic dependent launch when p.pdl.
template <class Kernel>
void launch_kernel(Kernel kernel, std::atomic<uint64_t>& configured, dim3 grid, size_t smem, const Params& p,
                   cudaStream_t stream) {
  int dev = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if ((configured.load(std::memory_order_acquire) & bit) == 0) {
    FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemLimit)));
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  launch_maybe_dependent(p.pdl, kernel, grid, dim3(unsigned(kThreads)), smem, stream, p);
}

template <bool kA8, int kMT, bool kPerBlock, bool kVec>
void launch(const Params& p, dim3 grid, size_t smem, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};
  launch_kernel(gemv_kernel<kA8, kMT, kPerBlock, kVec>, configured, grid, smem, p, stream);
}

template <bool kA8, int kMT, bool kPerBlock>
void launch_grouped(const Params& p, dim3 grid, size_t smem, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};
  launch_kernel(gemv_grouped_kernel<kA8, kMT, kPerBlock>, configured, grid, smem, p, stream);
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

// The FP16 (E4M3 activation) path: codes given or made while staging.
bool fp16_path(const Fp8GemvArgs& a) { return a.x_codes != nullptr || a.quantize_x; }
bool group_scales(const Fp8GemvArgs& a) { return fp16_path(a) && a.x_layout == ActivationScaleLayout::kGroup128; }

Fp8GemvPlan resolve_plan(const Fp8GemvArgs& a, const Fp8GemvPlan* plan) {
  const int64_t chunks = cdiv(a.k, kChunk);
  const bool x_group = group_scales(a);
  Fp8GemvPlan p = plan ? clamp_plan(*plan, chunks)
                       : choose_plan(a.m, a.n, a.k, x_group, a.x_codes != nullptr, a.quantize_x);
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

// The kernels' parameters for these arguments, plan and shared-memory layout (split-K
// workspace from a.workspace).
Params make_params(const Fp8GemvArgs& a, const Fp8GemvPlan& pl, const Layout& l) {
  const bool raw_codes = a.x_codes != nullptr;
  const int64_t chunks = cdiv(a.k, kChunk);
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
  p.x = raw_codes ? static_cast<const void*>(a.x_codes) : static_cast<const void*>(a.x);
  p.x_scale = a.x_scale;
  p.x_layout = int(a.x_layout);
  p.quant = a.quantize_x;
  p.rule = a.x_rule;
  const auto addr = reinterpret_cast<uintptr_t>(p.x);
  p.x_vec = addr % 16 == 0 && a.k % (raw_codes ? 16 : 8) == 0;
  p.bias = a.bias;
  p.y = a.y;
  p.pdl = a.programmatic_launch;
  p.split_rows = a.m;
  if (pl.k_splits > 1) {
    auto* ws = static_cast<unsigned char*>(a.workspace);
    p.counters = reinterpret_cast<unsigned*>(ws);
    p.partial = reinterpret_cast<float*>(ws + kCounterBytes);
  }
  return p;
}

// The grouped form's plan (fp8_gemv_grouped): the cost model's plan for the weight rows of
// every slot that may run (n × min(rows, max_slots): one slot per routed pair at most), read as
// one GEMV of m rows; K split further where shared memory needs it, and blocks taller where the
// slots' row groups would outrun the counters.
Fp8GemvPlan grouped_plan(const Fp8GemvArgs& a, const Fp8GemvGroups& g) {
  const int64_t chunks = cdiv(a.k, kChunk);
  const bool x_group = group_scales(a);
  const int64_t slots = std::min<int64_t>(g.rows, g.max_slots);
  Fp8GemvPlan p = choose_plan(a.m, a.n * slots, a.k, x_group, a.x_codes != nullptr, a.quantize_x);
  auto fit_smem = [&] {
    while (smem_layout(a.m, chunks, p.k_splits, x_group, a.x_codes != nullptr).bytes > kSmemLimit && p.k_splits < chunks)
      ++p.k_splits;
  };
  auto counters = [&] { return g.max_slots * cdiv(a.n, 16 * p.row_tiles); };
  fit_smem();
  while (p.k_splits > 1 && counters() > kCounterSlots && p.row_tiles < kWarps) p.row_tiles *= 2;
  // Still too many row groups for the counters (tall weights over many slots, e.g. Mixtral's
  // gate_up in a 1,024-row prefill): no K split where shared memory allows.
  if (p.k_splits > 1 && counters() > kCounterSlots) {
    p.k_splits = 1;
    fit_smem();
  }
  if (p.k_splits > 1 && counters() > kCounterSlots)
    throw Error("fp8_gemv_grouped: " + std::to_string(g.max_slots) + " slots of " + std::to_string(a.n) +
                " rows need more split-K counters than " + std::to_string(kCounterSlots));
  return p;
}

// The argument checks (the plan's own limits are grouped_plan's).
void validate_grouped(const Fp8GemvArgs& a, const Fp8GemvGroups& g) {
  validate(a, true);
  auto fail = [](const std::string& what) { throw Error("fp8_gemv_grouped: " + what); };
  if (g.slots == nullptr || g.w == nullptr || g.w_scale == nullptr) fail("slot table or weight tables missing");
  if (g.max_slots < 1 || g.max_slots > 65535) fail("max_slots = " + std::to_string(g.max_slots) + " is outside 1..65535");
  if (g.rows < 1) fail("no grouped rows");
  if (a.k % 16 != 0) fail("k = " + std::to_string(a.k) + " is not a multiple of 16");
  if (a.quantize_x && a.x_layout == ActivationScaleLayout::kTensor && a.x_scale == nullptr)
    fail("a dynamic per-tensor scale would span one slot's rows only: give it as x_scale");
}

size_t grouped_workspace(const Fp8GemvArgs& a, const Fp8GemvGroups& g, const Fp8GemvPlan& p) {
  if (p.k_splits == 1) return 0;
  return kCounterBytes + size_t(p.k_splits) * size_t(g.rows) * size_t(a.n) * 4;
}

}  // namespace

Fp8GemvPlan fp8_gemv_plan(const Fp8GemvArgs& a, const Fp8GemvPlan* requested) {
  validate(a);
  return resolve_plan(a, requested);
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
  const bool a8 = fp16_path(a);
  const bool raw_codes = a.x_codes != nullptr;  // staged through their own area first
  const int64_t chunks = cdiv(a.k, kChunk);
  const bool x_group = group_scales(a);
  const Layout l = smem_layout(a.m, chunks, pl.k_splits, x_group, raw_codes);
  if (l.bytes > kSmemLimit) throw Error("fp8_gemv: k = " + std::to_string(a.k) + " needs too much shared memory");

  const Params p = make_params(a, pl, l);
  const bool per_block = a.w_layout == WeightScaleLayout::kBlock128 || x_group;
  const bool vec = a.k % 16 == 0 && aligned16(a.w);
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

Fp8GemvPlan fp8_gemv_grouped_plan(const Fp8GemvArgs& a, const Fp8GemvGroups& g) {
  validate_grouped(a, g);
  return grouped_plan(a, g);
}

size_t fp8_gemv_grouped_workspace_bytes(const Fp8GemvArgs& a, const Fp8GemvGroups& g) {
  validate_grouped(a, g);
  return grouped_workspace(a, g, grouped_plan(a, g));
}

void fp8_gemv_grouped(const Fp8GemvArgs& a, const Fp8GemvGroups& g, cudaStream_t stream) {
  validate_grouped(a, g);
  const Fp8GemvPlan pl = grouped_plan(a, g);
  const size_t need = grouped_workspace(a, g, pl);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need))
    throw Error("fp8_gemv_grouped: needs a zero-filled workspace of " + std::to_string(need) +
                " bytes (fp8_gemv_grouped_workspace_bytes), got " + std::to_string(a.workspace ? a.workspace_bytes : 0));
  const int64_t chunks = cdiv(a.k, kChunk);
  const bool x_group = group_scales(a);
  const Layout l = smem_layout(a.m, chunks, pl.k_splits, x_group, a.x_codes != nullptr);
  if (l.bytes > kSmemLimit) throw Error("fp8_gemv_grouped: k = " + std::to_string(a.k) + " needs too much shared memory");
  Params p = make_params(a, pl, l);
  p.split_rows = g.rows;
  p.x_rows = g.x_rows;
  p.slots = g.slots;
  p.max_slots = g.max_slots;
  p.w_table = g.w;
  p.w_scale_table = g.w_scale;
  p.bias_table = g.bias;
  const bool per_block = a.w_layout == WeightScaleLayout::kBlock128 || x_group;
  const dim3 grid(unsigned(cdiv(a.n, 16 * pl.row_tiles)), unsigned(pl.k_splits), unsigned(g.max_slots));
  const bool a8 = fp16_path(a);
  const int mt = a.m > 8 ? 2 : 1;
  auto go = [&](auto a8_tag, auto mt_tag) {
    constexpr bool kA8 = decltype(a8_tag)::value;
    constexpr int kMT = decltype(mt_tag)::value;
    if (per_block) launch_grouped<kA8, kMT, true>(p, grid, l.bytes, stream);
    else launch_grouped<kA8, kMT, false>(p, grid, l.bytes, stream);
  };
  using T = std::true_type;
  using F = std::false_type;
  using M1 = std::integral_constant<int, 1>;
  using M2 = std::integral_constant<int, 2>;
  if (a8) {
    if (mt == 1) go(T{}, M1{});
    else go(T{}, M2{});
  } else {
    if (mt == 1) go(F{}, M1{});
    else go(F{}, M2{});
  }
}

}  // namespace fp8lm::cuda
