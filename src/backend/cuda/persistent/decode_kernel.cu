// The persistent decode kernel; see decode_program.h for what it runs and its numerics.
//
// Shape of the work:
//   * A GEMV tile is 16 weight rows × the whole K (two such tiles for gate/up: gate rows and
//     their up rows, so the tile can finish SiLU·mul itself). Its 8 warps split K; lane (g, t)
//     streams 16 bytes of rows g and g + 8 per 64-byte step, the tile's rows as the MMA's 16-row
//     operand and the ≤ 8 staged activation rows as its 8 columns (fp8_gemv.h's arrangement).
//     Warp partials are summed in shared memory in warp order.
//   * A tile stages its input first: the rows of h normed (input / post-attention / final norm)
//     or the rows of attn / act as they are, then quantized per row (W8A8) into E4M3 codes, or
//     kept in BF16. One warp a row, three passes over it from L2 (sum of squares, amax, store).
//   * An attention instruction takes one (row, KV head, split of the context): it ropes its
//     query heads (and q/k-norms them), the split holding the new position stores the new K/V
//     first, then a group of head_dim / 8 lanes per position keeps a running softmax per head;
//     the CTA's groups merge in shared memory, the split's state goes to `partials`, and the last
//     split of a (row, KV head) to finish (a counter) merges the splits in split order.
//   * Dependencies: an instruction waits until its input phase's counter reaches that phase's
//     instruction count (thread 0 polls with an acquire load, the CTA's barrier passes it on);
//     when done, it counts itself into its own phase's counter (a fence, the CTA's barrier, thread 0's
//     atomic add; a CTA's run of one phase adds once).
//     Activations written inside the launch are read through L2 (ld.global.cg), never L1.
//   * Before an instruction, thread 0 asks L2 for the weights (and cached K/V) of the CTA's next
//     instructions, up to kPrefetchBytes ahead (cp.async.bulk.prefetch.L2), so the stream runs on while it waits.
//   * The last CTA to finish zeroes every counter for the next launch.
#include "backend/cuda/persistent/decode_program.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "backend/cuda/attention/kv_store_device.cuh"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/norm_rope_device.cuh"
#include "backend/cuda/gemv/mma_fragments.cuh"
#include "backend/cuda/quant/quantize_device.cuh"
#include "backend/paged_kv_types.h"
#include "common/error.h"
#include "numerics/silu.h"

namespace fp8lm::cuda::persistent {
namespace {

constexpr int kWarps = kThreads / 32;
// Bytes of the CTA's next instructions' weights (and K/V) asked into L2 ahead of their use: 256 KB
// an SM keeps ~11 µs of an SM's share of the copy bandwidth in flight, and 132 SMs' worth (34 MB)
// stays inside the 50 MB L2.
constexpr uint32_t kPrefetchBytes = 256 * 1024;
constexpr int kRedBytes = kWarps * 2 * kTileRows * kMaxRows * 4;  // warp partials of two tiles

// ---- memory order between CTAs -----------------------------------------------------------------

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread 0 waits until *counter ≥ target; the barrier then lets the whole CTA on.
__device__ __forceinline__ void wait_for(const unsigned* counter, unsigned target) {
  if (threadIdx.x == 0) {
    int spins = 0;
    while (load_acquire(counter) < target) {
      if (++spins > 8) __nanosleep(64);
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  // Whole 16-byte units of a 16-byte aligned range (every weight row here is).
  bytes &= ~15u;
  if (bytes == 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ uint4 ld_cg16(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 8 BF16 values written inside this launch, as floats.
__device__ __forceinline__ void load8_cg(const __nv_bfloat16* p, float (&v)[8]) { bf16x8_to_float(ld_cg16(p), v); }

__device__ __forceinline__ unsigned* phase_counter(const Params& p, int layer, int phase) {
  return p.counters + layer * kPhasesPerLayer + phase;
}

// ---- staging a GEMV tile's input ---------------------------------------------------------------

// Bytes per staged row: k elements, padded by 16 bytes so that the rows of one 64-byte step fall
// in different banks.
__device__ __forceinline__ int staged_stride(const DeviceLinear& l) { return int(row_bytes(l)) + 16; }

// The row statistics a staging pass shares across the CTA.
struct StageShared {
  double ss[kMaxRows][kWarps];  // sum-of-squares partials per row and warp
  float inv[kMaxRows];          // 1 / rms per row
  unsigned amax[kMaxRows];      // amax bits per row (order-free atomicMax of non-negative floats)
  float row_scale[kMaxRows];    // W8A8: the activation scale per row
};

// Counters beside the phases' (decode_program.h: counter_count): the row amaxes the producers of
// attn (the attention merges) and act (the gate/up tiles) leave for the tiles that quantize them.
__device__ __forceinline__ unsigned* merge_counter(const Params& p, int row, int kv_head) {
  return p.counters + p.shape.layers * kPhasesPerLayer + row * p.shape.kv_heads + kv_head;
}
__device__ __forceinline__ unsigned* attn_amax(const Params& p, int layer) {
  return p.counters + p.shape.layers * kPhasesPerLayer + kMaxRows * p.shape.kv_heads + layer * kMaxRows;
}
__device__ __forceinline__ unsigned* act_amax(const Params& p, int layer) {
  return attn_amax(p, layer) + p.shape.layers * kMaxRows;
}

// amax into a row's slot: the warp's maximum, then one atomicMax (NaN skipped, as fmaxf does).
__device__ __forceinline__ void warp_amax_to(unsigned* slot, float a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
  if ((threadIdx.x & 31) == 0 && a > 0.0f) atomicMax(slot, __float_as_uint(a));
}

// The rows of h, RMS-normed with `norm`, as the input of `l` (k = hidden): copied whole into
// shared memory first (`raw`, every copy in flight at once), then from there the rows' sums of
// squares, their amaxes (W8A8, dynamic) and the staged codes or BF16 values. The arithmetic is
// rms_norm's and quantize_fp8's (model_kernels.cu, quant_kernels.cu): a double sum of squares,
// the normed value rounded to BF16, the amax of those, scale_from_amax, quantize8.
__device__ void stage_normed(const Params& p, const DeviceLinear& l, const float* norm, unsigned char* raw,
                             unsigned char* xs, StageShared& st) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int m = p.rows, nv = l.k / 8, stride = staged_stride(l);
  for (int i = threadIdx.x; i < m * nv; i += kThreads) cp_async16(raw + i * 16, p.h + int64_t(i) * 8, 16);
  asm volatile("cp.async.wait_all;" ::: "memory");
  if (threadIdx.x < kMaxRows) st.amax[threadIdx.x] = 0u;
  __syncthreads();
  const uint16_t* rh = reinterpret_cast<const uint16_t*>(raw);
  for (int r = 0; r < m; ++r) {
    double ss = 0.0;
    for (int v = threadIdx.x; v < nv; v += kThreads) {
      float x[8];
      load8<true>(rh + (r * nv + v) * 8, 8, x);
      ss = sum_squares(x, ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xFFFFFFFFu, ss, o));
    if (lane == 0) st.ss[r][warp] = ss;
  }
  __syncthreads();
  if (threadIdx.x < m) {
    double t = 0.0;
    for (int w = 0; w < kWarps; ++w) t = __dadd_rn(t, st.ss[threadIdx.x][w]);
    st.inv[threadIdx.x] = rms_inv(t, l.k, p.eps);
  }
  __syncthreads();
  auto normed = [&](int r, int v, float (&x)[8]) {
    load8<true>(rh + (r * nv + v) * 8, 8, x);
    float w[8];
    load8<true>(norm + v * 8, 8, w);
    scale8(x, w, st.inv[r]);
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = round_bf16(x[j]);
  };
  if (l.fp8) {
    if (l.static_x_scale == nullptr) {
      for (int r = 0; r < m; ++r) {
        float a = 0.0f;
        for (int v = threadIdx.x; v < nv; v += kThreads) {
          float x[8];
          normed(r, v, x);
#pragma unroll
          for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(x[j]));
        }
        warp_amax_to(&st.amax[r], a);
      }
      __syncthreads();
    }
    if (threadIdx.x < m)
      st.row_scale[threadIdx.x] = l.static_x_scale != nullptr ? __ldg(l.static_x_scale)
                                                              : scale_from_amax(__uint_as_float(st.amax[threadIdx.x]), l.rule);
    __syncthreads();
  }
  for (int i = threadIdx.x; i < m * nv; i += kThreads) {
    const int r = i / nv, v = i % nv;
    float x[8];
    normed(r, v, x);
    if (l.fp8) *reinterpret_cast<uint2*>(xs + r * stride + v * 8) = quantize8(x, st.row_scale[r], Fp8Format::kE4M3);
    else store8<true>(reinterpret_cast<uint16_t*>(xs + r * stride) + v * 8, 8, x);
  }
  __syncthreads();
}

// Rows of `src` ([rows, k], attn or act) as the input of `l`, as they are: BF16 copied (cp.async),
// or E4M3 codes under the row scales from `amax` (the producers' row amaxes) or the static scale —
// quantize_fp8's codes, from one pass with every thread's loads in flight.
__device__ void stage_plain(const Params& p, const DeviceLinear& l, const __nv_bfloat16* src, const unsigned* amax,
                            unsigned char* xs, StageShared& st) {
  const int m = p.rows, nv = l.k / 8, stride = staged_stride(l);
  if (!l.fp8) {
    for (int i = threadIdx.x; i < m * nv; i += kThreads)
      cp_async16(xs + (i / nv) * stride + (i % nv) * 16, src + int64_t(i) * 8, 16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    return;
  }
  if (threadIdx.x < m)
    st.row_scale[threadIdx.x] = l.static_x_scale != nullptr
                                    ? __ldg(l.static_x_scale)
                                    : scale_from_amax(__uint_as_float(__ldcg(amax + threadIdx.x)), l.rule);
  __syncthreads();
  constexpr int kBatch = 4;
  for (int i0 = threadIdx.x; i0 < m * nv; i0 += kBatch * kThreads) {
    float x[kBatch][8];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * kThreads < m * nv) load8_cg(src + int64_t(i0 + b * kThreads) * 8, x[b]);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kThreads;
      if (i >= m * nv) break;
      const int r = i / nv, v = i % nv;
      *reinterpret_cast<uint2*>(xs + r * stride + v * 8) = quantize8(x[b], st.row_scale[r], Fp8Format::kE4M3);
    }
  }
  __syncthreads();
}

// ---- the GEMV tile -----------------------------------------------------------------------------

// acc[part] += rows row0[part] + g, + g + 8 of W times the staged activations, over this warp's
// share of K. kFp8: E4M3 weights and codes (FP16 MMA on exact values); else BF16 both.
template <bool kFp8, int kParts>
__device__ __forceinline__ void tile_products(const Params& p, const DeviceLinear& l, const int (&row0)[kParts],
                                              const unsigned char* xs, float (&acc)[kParts][4]) {
  constexpr int kUnroll = kParts == 1 ? 8 : 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row_bytes = int64_t(l.k) * (kFp8 ? 1 : 2);
  const int steps = int(row_bytes / 64);
  const int s0 = warp * steps / kWarps, s1 = (warp + 1) * steps / kWarps;
  const auto* w = static_cast<const unsigned char*>(l.w);
  const unsigned char* pa[kParts];
  const unsigned char* pb[kParts];
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    pa[i] = w + int64_t(row0[i] + g) * row_bytes + 16 * t;
    pb[i] = w + int64_t(row0[i] + g + 8) * row_bytes + 16 * t;
  }
  const bool has_x = g < p.rows;
  const unsigned char* xr = xs + g * staged_stride(l) + 16 * t;
  for (int sb = s0; sb < s1; sb += kUnroll) {
    uint4 wa[kUnroll][kParts], wb[kUnroll][kParts];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int i = 0; i < kParts; ++i) {
        if (sb + u < s1) {
          wa[u][i] = ld_stream(pa[i] + int64_t(sb + u) * 64);
          wb[u][i] = ld_stream(pb[i] + int64_t(sb + u) * 64);
        } else {
          wa[u][i] = wb[u][i] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (sb + u >= s1) break;
      const uint4 xv = has_x ? *reinterpret_cast<const uint4*>(xr + (sb + u) * 64) : make_uint4(0, 0, 0, 0);
      const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
      for (int i = 0; i < kParts; ++i) {
        const uint32_t qa[4] = {wa[u][i].x, wa[u][i].y, wa[u][i].z, wa[u][i].w};
        const uint32_t qb[4] = {wb[u][i].x, wb[u][i].y, wb[u][i].z, wb[u][i].w};
        if constexpr (kFp8) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t a0, a1, a2, a3;
            expand<true>(qa[q], a0, a2);
            expand<true>(qb[q], a1, a3);
            const uint32_t b0 = codes_to_f16x2(__byte_perm(xw[q], 0, 0x4420));
            const uint32_t b1 = codes_to_f16x2(__byte_perm(xw[q], 0, 0x4431));
            mma<true>(acc[i], a0, a1, a2, a3, b0, b1);
          }
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j)
            mma<false>(acc[i], qa[2 * j], qb[2 * j], qa[2 * j + 1], qb[2 * j + 1], xw[2 * j], xw[2 * j + 1]);
        }
      }
    }
  }
}

enum class Epilogue { kStore, kResidual, kSiluMul };

// One instruction's GEMV: kParts tiles of `l` at rows row0[] (the input already staged), the warp
// partials summed in warp order, scaled, biased, rounded to BF16 and written by `epilogue`:
//   kStore: y[row, n0 + r] = v; kResidual: y[row, n0 + r] = bf16(y + v) (y = h);
//   kSiluMul: y[row, n0 + r] = silu_mul(v_gate, v_up) (kParts = 2: gate, then up).
template <int kParts>
__device__ void gemv(const Params& p, const DeviceLinear& l, const int (&row0)[kParts], const unsigned char* xs,
                     const float* row_scale, float* red, Epilogue epilogue, __nv_bfloat16* y, int64_t ld_y, int n0,
                     unsigned* amax_out = nullptr) {
  // The epilogue's operands first (weight scales, bias, the residual), so that their loads overlap
  // the products instead of following them.
  const int idx = threadIdx.x;  // (row in tile, token): 16 × 8 = 128 threads, warps 0-3
  const int rr = idx / kMaxRows, tok = idx % kMaxRows;
  const bool writes = idx < kTileRows * kMaxRows && tok < p.rows;
  float sw[kParts], bias[kParts], resid = 0.0f;
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    const int row = row0[i] + rr;
    sw[i] = writes && l.fp8 ? __ldg(l.w_scale + (l.w_scale_per_row ? row : 0)) : 1.0f;
    bias[i] = writes && l.bias != nullptr ? __bfloat162float(l.bias[row]) : 0.0f;
  }
  __nv_bfloat16* out = y + int64_t(tok) * ld_y + n0 + rr;
  if (writes && epilogue == Epilogue::kResidual) resid = __bfloat162float(__ldcg(out));
  float acc[kParts][4] = {};
  if (l.fp8) tile_products<true, kParts>(p, l, row0, xs, acc);
  else tile_products<false, kParts>(p, l, row0, xs, acc);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  // red[part][warp][row][tok]
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    float* r = red + (i * kWarps + warp) * kTileRows * kMaxRows;
    r[g * kMaxRows + 2 * t] = acc[i][0];
    r[g * kMaxRows + 2 * t + 1] = acc[i][1];
    r[(g + 8) * kMaxRows + 2 * t] = acc[i][2];
    r[(g + 8) * kMaxRows + 2 * t + 1] = acc[i][3];
  }
  __syncthreads();
  if (idx >= kTileRows * kMaxRows) return;
  float a = 0.0f;  // |the value written| for the row amax (kSiluMul)
  if (writes) {
    float v[kParts];
#pragma unroll
    for (int i = 0; i < kParts; ++i) {
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w) s = __fadd_rn(s, red[((i * kWarps + w) * kTileRows + rr) * kMaxRows + tok]);
      if (l.fp8) s = __fmul_rn(__fmul_rn(__fmul_rn(s, 256.0f), row_scale[tok]), sw[i]);
      if (l.bias != nullptr) s = __fadd_rn(s, bias[i]);
      v[i] = round_bf16(s);
    }
    if (epilogue == Epilogue::kStore) {
      *out = __float2bfloat16_rn(v[0]);
    } else if (epilogue == Epilogue::kResidual) {
      *out = __float2bfloat16_rn(round_bf16(__fadd_rn(resid, v[0])));
    } else if constexpr (kParts == 2) {
      const float act = round_bf16(silu_mul_f32(v[0], v[1]));
      *out = __float2bfloat16_rn(act);
      a = fabsf(act);
    }
  }
  if (amax_out != nullptr) {
    // Lanes of one token: tok, tok + 8, tok + 16, tok + 24 of the warp.
    a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, 8));
    a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, 16));
    if ((threadIdx.x & 31) < kMaxRows && tok < p.rows && a > 0.0f) atomicMax(amax_out + tok, __float_as_uint(a));
  }
}

// ---- attention -----------------------------------------------------------------------------------

// Floats of one attention state ([group][head_dim + 2]: the output sums, the maximum, the sum of
// weights), rounded up to 16 bytes so that states copy as vectors.
__host__ __device__ constexpr int partial_stride(int group, int head_dim) { return (group * (head_dim + 2) + 3) / 4 * 4; }

// The split [s0, s1) of the positions row `row` attends (the new one at `pos` included).
struct SplitRange {
  int pos = 0, s0 = 0, s1 = 0;
};
__device__ __forceinline__ SplitRange split_range(const Params& p, const DeviceLayer& L, int row, int split) {
  SplitRange r;
  r.pos = p.row_position[row];
  const int lo = L.window > 0 ? max(0, r.pos - L.window + 1) : 0;
  const int total = r.pos - lo + 1;
  const int chunk = (total + p.splits - 1) / p.splits;
  r.s0 = min(lo + split * chunk, r.pos + 1);
  r.s1 = min(r.s0 + chunk, r.pos + 1);
  return r;
}

__device__ __forceinline__ int64_t cache_index(const Params& p, const int32_t* table, int kv_head, int pos, int e0) {
  const int64_t block = table[pos / p.block_size];
  return kv_cache_index(block, kv_head, p.shape.kv_heads, pos, p.block_size, p.shape.head_dim, e0);
}

// 8 cached elements (BF16 or FP8 codes) at element index `at` as floats (FP8: the codes' values).
__device__ __forceinline__ void load_kv8(const void* cache, int element, int64_t at, float (&v)[8]) {
  using backend::KvElement;
  if (element == int(KvElement::kBF16)) {
    bf16x8_to_float(ld_cg16(static_cast<const uint16_t*>(cache) + at), v);
  } else {
    uint2 c;
    asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];" : "=r"(c.x), "=r"(c.y) : "l"(static_cast<const uint8_t*>(cache) + at));
    const Fp8Format f = element == int(KvElement::kE4M3) ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = device_fp8_to_float(uint8_t(((j < 4 ? c.x : c.y) >> (8 * (j % 4))) & 0xFF), f);
  }
}

// One head of the new row (q or k: normed with `norm` when given, then rotated; both rounded to
// BF16 as split_norm_rope_qkv stores them) by a group of head_dim / 8 lanes, lane `gl` holding
// elements 8·gl … 8·gl + 7. Every lane of the warp calls it (the rotation's partner is a shuffle).
__device__ __forceinline__ void rope_head(const Params& p, const __nv_bfloat16* src, const float* norm, int pos,
                                          int gl, int group, float (&x)[8]) {
  const int hd = p.shape.head_dim, half = hd / 2;
  const bool in = gl < group;
  if (in) load8_cg(src + gl * 8, x);
  else
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = 0.0f;
  if (norm != nullptr) {
    double ss = sum_squares(x, 0.0);
    for (int o = group >> 1; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xFFFFFFFFu, ss, o));
    const float inv = rms_inv(ss, hd, p.eps);
    if (in) {
      float w[8];
      load8<true>(norm + gl * 8, 8, w);
      scale8(x, w, inv);
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = round_bf16(x[j]);
    }
  }
  // Rotate-half: element e pairs with e ± half, held by the lane group / 2 away.
  float other[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) other[j] = __shfl_xor_sync(0xFFFFFFFFu, x[j], group / 2);
  const bool first = gl * 8 < half;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = gl * 8 + j;
    const int f = first ? e : e - half;
    float c = 1.0f, s = 0.0f;
    if (in) rope_cos_sin(pos, __ldg(p.rope_inv_freq + f), p.rope_attention_factor, c, s);
    const float r = first ? rope_first(x[j], other[j], c, s) : rope_second(other[j], x[j], c, s);
    x[j] = round_bf16(r);
  }
}

template <int kHeadDim>
__device__ void attention(const Params& p, const DeviceLayer& L, int layer, int row, int kv_head, int split,
                          unsigned char* smem) {
  constexpr int kGroupLanes = kHeadDim / 8;      // lanes per position
  constexpr int kSubs = 32 / kGroupLanes;        // positions per warp at a time
  const int G = p.shape.q_heads / p.shape.kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane / kGroupLanes, gl = lane % kGroupLanes;
  const int q_width = p.shape.q_heads * kHeadDim, kv_width = p.shape.kv_heads * kHeadDim;
  const int64_t ld_qkv = q_width + 2 * kv_width;
  const __nv_bfloat16* qkv_row = p.qkv + int64_t(row) * ld_qkv;
  const int32_t* table = p.block_tables + int64_t(p.row_seq[row]) * p.max_blocks_per_seq;
  const SplitRange sr = split_range(p, L, row, split);
  float* qs = reinterpret_cast<float*>(smem);                 // [G][head_dim]
  float* state = qs + kMaxGroup * kHeadDim;                   // [warps · subs][state_stride]
  const int state_stride = partial_stride(G, kHeadDim);       // [G][head_dim + 2], padded to 16 bytes

  // The query heads, roped (warp h: head h), and the new K/V into the cache by the split that
  // holds the new position (warps G, G + 1, or 0 and 1 after the heads when G = 8).
  if (warp < G) {
    float x[8];
    rope_head(p, qkv_row + (kv_head * G + warp) * kHeadDim, L.q_norm, sr.pos, lane, kGroupLanes, x);
    if (lane < kGroupLanes)
#pragma unroll
      for (int j = 0; j < 8; ++j) qs[warp * kHeadDim + lane * 8 + j] = x[j];
  }
  const bool stores = sr.pos >= sr.s0 && sr.pos < sr.s1;
  if (stores && warp == kWarps - 1) {
    float x[8];
    rope_head(p, qkv_row + q_width + kv_head * kHeadDim, L.k_norm, sr.pos, lane, kGroupLanes, x);
    if (lane < kGroupLanes) {
      uint4 bits;
      bits.x = bf16_bits(x[0]) | (bf16_bits(x[1]) << 16);
      bits.y = bf16_bits(x[2]) | (bf16_bits(x[3]) << 16);
      bits.z = bf16_bits(x[4]) | (bf16_bits(x[5]) << 16);
      bits.w = bf16_bits(x[6]) | (bf16_bits(x[7]) << 16);
      store_kv8(backend::KvElement(L.kv_element), L.k_cache, cache_index(p, table, kv_head, sr.pos, lane * 8), bits,
                L.k_scale);
      const uint4 v = ld_cg16(qkv_row + q_width + kv_width + kv_head * kHeadDim + lane * 8);
      store_kv8(backend::KvElement(L.kv_element), L.v_cache, cache_index(p, table, kv_head, sr.pos, lane * 8), v,
                L.v_scale);
    }
  }
  __syncthreads();

  // A running softmax per (warp, sub) and query head over positions s0 + (warp · subs + sub) + …
  float q[kMaxGroup][8];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h)
#pragma unroll
    for (int j = 0; j < 8; ++j) q[h][j] = h < G ? qs[h * kHeadDim + gl * 8 + j] : 0.0f;
  float m[kMaxGroup], l[kMaxGroup], o[kMaxGroup][8];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[h][j] = 0.0f;
  }
  const bool fp8 = L.kv_element != int(backend::KvElement::kBF16);
  const float s_scale = p.attention_scale * (fp8 ? L.k_scale : 1.0f);
  // Two positions a lane at a time (pos, pos + kStep), both loads in flight before either is used.
  constexpr int kStep = kWarps * kSubs;
  for (int base = sr.s0 + warp * kSubs; base < sr.s1; base += 2 * kStep) {
    float kv[2][8], vv[2][8];
    bool live[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int pos = base + sub + u * kStep;
      live[u] = pos < sr.s1;
      if (live[u]) {
        const int64_t at = cache_index(p, table, kv_head, pos, gl * 8);
        load_kv8(L.k_cache, L.kv_element, at, kv[u]);
        load_kv8(L.v_cache, L.kv_element, at, vv[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= G) break;
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) d = fmaf(q[h][j], live[u] ? kv[u][j] : 0.0f, d);
#pragma unroll
        for (int off = kGroupLanes / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xFFFFFFFFu, d, off);
        if (!live[u]) continue;
        const float s = d * s_scale;
        const float mn = fmaxf(m[h], s);
        const float c = expf(m[h] - mn), e = expf(s - mn);
        l[h] = l[h] * c + e;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[h][j] = o[h][j] * c + e * vv[u][j];
        m[h] = mn;
      }
    }
  }
  // The CTA's states into shared memory, then merged in (warp, sub) order by thread (h, e).
  float* mine = state + (warp * kSubs + sub) * state_stride;
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) {
    if (h >= G) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) mine[h * (kHeadDim + 2) + gl * 8 + j] = o[h][j];
    if (gl == 0) mine[h * (kHeadDim + 2) + kHeadDim] = m[h], mine[h * (kHeadDim + 2) + kHeadDim + 1] = l[h];
  }
  __syncthreads();
  const int nstates = kWarps * kSubs;
  float* out = p.partials + ((int64_t(row) * p.shape.kv_heads + kv_head) * p.splits + split) * state_stride;
  for (int idx = threadIdx.x; idx < G * (kHeadDim + 2); idx += kThreads) {
    const int h = idx / (kHeadDim + 2), e = idx % (kHeadDim + 2);
    float M = -INFINITY;
    for (int s = 0; s < nstates; ++s) M = fmaxf(M, state[s * state_stride + h * (kHeadDim + 2) + kHeadDim]);
    float acc = 0.0f;
    for (int s = 0; s < nstates; ++s) {
      const float* st = state + s * state_stride + h * (kHeadDim + 2);
      const float w = st[kHeadDim] == -INFINITY ? 0.0f : expf(st[kHeadDim] - M);
      const float x = e < kHeadDim ? st[e] : e == kHeadDim ? 0.0f : st[kHeadDim + 1];
      if (e != kHeadDim) acc += w * x;
    }
    out[idx] = e == kHeadDim ? M : acc;
  }
  // The last split of (row, KV head) to finish merges the splits in split order.
  unsigned* merge = merge_counter(p, row, kv_head);
  __shared__ bool s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    s_last = atomicAdd(merge, 1u) == unsigned(p.splits - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // The splits' states into shared memory (every load in flight at once), merged from there.
  const float* parts = p.partials + (int64_t(row) * p.shape.kv_heads + kv_head) * p.splits * state_stride;
  {
    const int n4 = p.splits * state_stride / 4;
    constexpr int kBatch = 4;
    for (int i0 = threadIdx.x; i0 < n4; i0 += kBatch * kThreads) {
      uint4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (i0 + b * kThreads < n4) v[b] = ld_cg16(parts + 4 * (i0 + b * kThreads));
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (i0 + b * kThreads < n4) reinterpret_cast<uint4*>(state)[i0 + b * kThreads] = v[b];
    }
  }
  __syncthreads();
  float a = 0.0f;
  for (int idx = threadIdx.x; idx < G * kHeadDim; idx += kThreads) {
    const int h = idx / kHeadDim, e = idx % kHeadDim;
    float M = -INFINITY;
    for (int s = 0; s < p.splits; ++s) M = fmaxf(M, state[s * state_stride + h * (kHeadDim + 2) + kHeadDim]);
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float* st = state + s * state_stride + h * (kHeadDim + 2);
      const float ms = st[kHeadDim];
      if (ms == -INFINITY) continue;
      const float w = expf(ms - M);
      num += w * st[e];
      den += w * st[kHeadDim + 1];
    }
    const __nv_bfloat16 v = __float2bfloat16_rn(num / den * (fp8 ? L.v_scale : 1.0f));
    p.attn[int64_t(row) * q_width + (kv_head * G + h) * kHeadDim + e] = v;
    a = fmaxf(a, fabsf(__bfloat162float(v)));
  }
  warp_amax_to(attn_amax(p, layer) + row, a);  // o_proj's activation scale of the row
  if (threadIdx.x == 0) *merge = 0;  // for the next layer and the next launch
}

// ---- prefetch ---------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t prefetch_rows(const DeviceLinear& l, int row0, int rows) {
  const auto* base = static_cast<const unsigned char*>(l.w) + row0 * row_bytes(l);
  const int64_t bytes = rows * row_bytes(l);
  for (int64_t off = 0; off < bytes; off += (int64_t(1) << 20))
    prefetch_l2(base + off, uint32_t(min(bytes - off, int64_t(1) << 20)));
  return uint32_t(bytes);
}

// Thread 0: asks L2 for what instruction `ins` will stream: its weight rows, or the cached K/V of
// its split (positions before the new one: written by earlier steps). Returns the bytes asked for.
__device__ uint32_t prefetch(const Params& p, const Instruction& ins) {
  const Op op = Op(ins.op);
  if (op == Op::kLmHead) return prefetch_rows(p.lm_head, ins.a * kTileRows, kTileRows);
  const DeviceLayer& L = p.layers[ins.layer];
  switch (op) {
    case Op::kQkv: return prefetch_rows(L.qkv, ins.a * kTileRows, kTileRows);
    case Op::kO: return prefetch_rows(L.o, ins.a * kTileRows, kTileRows);
    case Op::kDown: return prefetch_rows(L.down, ins.a * kTileRows, kTileRows);
    case Op::kGateUp:
      return prefetch_rows(L.gate_up, ins.a * kTileRows, kTileRows) +
             prefetch_rows(L.gate_up, p.shape.intermediate + ins.a * kTileRows, kTileRows);
    case Op::kAttention: {
      const SplitRange sr = split_range(p, L, ins.a, ins.c);
      const int32_t* table = p.block_tables + int64_t(p.row_seq[ins.a]) * p.max_blocks_per_seq;
      const int elem = L.kv_element == int(backend::KvElement::kBF16) ? 2 : 1;
      const uint32_t block_bytes = uint32_t(p.block_size) * p.shape.head_dim * elem;
      uint32_t bytes = 0;
      for (int b = sr.s0 / p.block_size; b * p.block_size < min(sr.s1, sr.pos); ++b) {
        const int64_t at = kv_cache_index(table[b], ins.b, p.shape.kv_heads, 0, p.block_size, p.shape.head_dim, 0) *
                           elem;
        prefetch_l2(static_cast<const unsigned char*>(L.k_cache) + at, block_bytes);
        prefetch_l2(static_cast<const unsigned char*>(L.v_cache) + at, block_bytes);
        bytes += 2 * block_bytes;
      }
      return bytes;
    }
    default: return 0;
  }
}

// ---- the kernel ---------------------------------------------------------------------------------

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// kProfile: thread 0 times each instruction's parts into p.profile (decode_program.h, Profile).
template <int kHeadDim, bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ StageShared st;
  __shared__ unsigned long long prof[kProfileKinds][kProfileParts];
  uint64_t last = 0;
  auto mark = [&](int kind, int part) {
    if constexpr (kProfile) {
      if (threadIdx.x == 0) {
        const uint64_t t = now_ns();
        prof[kind][part] += t - last;
        last = t;
      }
    }
  };
  if constexpr (kProfile) {
    if (threadIdx.x < kProfileKinds * kProfileParts) (&prof[0][0])[threadIdx.x] = 0;
    if (threadIdx.x == 0) last = now_ns();
    __syncthreads();
  }
  float* red = reinterpret_cast<float*>(smem);
  unsigned char* raw = smem + kRedBytes;                                 // rows of h, normed inputs
  unsigned char* xs = raw + p.rows * p.shape.hidden * 2;                 // the staged GEMV input
  unsigned char* scratch = raw;                                          // attention's state
  const int q0 = p.queue_start[blockIdx.x], q1 = p.queue_start[blockIdx.x + 1];
  const int layers = p.shape.layers;
  const int q_width = p.shape.q_heads * kHeadDim;
  const int64_t ld_qkv = q_width + 2 * p.shape.kv_heads * kHeadDim;

  // Counting done instructions: a CTA's run of one phase adds its count once, when the phase
  // changes or before the CTA waits (never hold a count back while waiting: that could deadlock).
  unsigned* pending = nullptr;
  unsigned pending_n = 0;
  auto flush = [&] {
    if (pending_n == 0) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(pending, pending_n);
    pending_n = 0;
  };
  auto count = [&](unsigned* c) {
    if (c != pending) flush();
    pending = c;
    ++pending_n;
  };
  // A wait already met (the same counter and target as the last one) is not waited for again.
  const unsigned* met = nullptr;
  unsigned met_target = 0;
  auto wait = [&](const unsigned* c, unsigned target) {
    if (c == met && target == met_target) return;
    flush();
    wait_for(c, target);
    met = c, met_target = target;
  };
  int staged = -1;  // (layer, op) whose input xs holds: a run of one phase stages it once

  // Thread 0's prefetch window: instructions [qi, prefetched) asked for, `ahead` bytes of them,
  // each one's bytes in a ring (at most kPrefetchRing instructions ahead).
  constexpr int kPrefetchRing = 32;
  __shared__ uint32_t ring[kPrefetchRing];
  int prefetched = q0;
  uint32_t ahead = 0;
  for (int qi = q0; qi < q1; ++qi) {
    if (threadIdx.x == 0) {
      if (qi > q0) ahead -= ring[(qi - 1) % kPrefetchRing];  // the instruction before is done with its bytes
      for (; prefetched < q1 && (prefetched <= qi || (ahead < kPrefetchBytes && prefetched - qi < kPrefetchRing));
           ++prefetched) {
        const uint32_t b = prefetch(p, p.instructions[p.queue[prefetched]]);
        ring[prefetched % kPrefetchRing] = b;
        ahead += b;
      }
    }
    const Instruction ins = p.instructions[p.queue[qi]];
    const Op op = Op(ins.op);
    const int kind = int(op);
    const int layer = ins.layer;
    const int key = layer * 8 + int(op);
    const int r0[1] = {ins.a * kTileRows};
    if (op == Op::kLmHead) {
      wait(phase_counter(p, layers - 1, 4), unsigned(p.phase_count[4]));
      mark(kind, 0);
      if (staged != key) stage_normed(p, p.lm_head, p.final_norm, raw, xs, st);
      mark(kind, 1);
      staged = key;
      gemv<1>(p, p.lm_head, r0, xs, st.row_scale, red, Epilogue::kStore, p.logits, p.shape.vocab, r0[0]);
      __syncthreads();
      mark(kind, 2);
      if (kProfile && threadIdx.x == 0) ++prof[kind][3];
      continue;  // nothing waits for lm_head inside the launch
    }
    const DeviceLayer& L = p.layers[layer];
    switch (op) {
      case Op::kQkv:
        if (layer > 0) wait(phase_counter(p, layer - 1, 4), unsigned(p.phase_count[4]));
        mark(kind, 0);
        if (staged != key) stage_normed(p, L.qkv, L.input_norm, raw, xs, st);
        mark(kind, 1);
        gemv<1>(p, L.qkv, r0, xs, st.row_scale, red, Epilogue::kStore, p.qkv, ld_qkv, r0[0]);
        count(phase_counter(p, layer, 0));
        break;
      case Op::kAttention:
        wait(phase_counter(p, layer, 0), unsigned(p.phase_count[0]));
        mark(kind, 0);
        mark(kind, 1);
        attention<kHeadDim>(p, L, layer, ins.a, ins.b, ins.c, scratch);
        count(phase_counter(p, layer, 1));
        break;
      case Op::kO:
        wait(phase_counter(p, layer, 1), unsigned(p.phase_count[1]));
        mark(kind, 0);
        if (staged != key) stage_plain(p, L.o, p.attn, attn_amax(p, layer), xs, st);
        mark(kind, 1);
        gemv<1>(p, L.o, r0, xs, st.row_scale, red, Epilogue::kResidual, p.h, p.shape.hidden, r0[0]);
        count(phase_counter(p, layer, 2));
        break;
      case Op::kGateUp: {
        wait(phase_counter(p, layer, 2), unsigned(p.phase_count[2]));
        mark(kind, 0);
        if (staged != key) stage_normed(p, L.gate_up, L.post_norm, raw, xs, st);
        mark(kind, 1);
        const int r2[2] = {r0[0], p.shape.intermediate + r0[0]};
        gemv<2>(p, L.gate_up, r2, xs, st.row_scale, red, Epilogue::kSiluMul, p.act, p.shape.intermediate, r0[0],
                act_amax(p, layer));
        count(phase_counter(p, layer, 3));
        break;
      }
      case Op::kDown:
        wait(phase_counter(p, layer, 3), unsigned(p.phase_count[3]));
        mark(kind, 0);
        if (staged != key) stage_plain(p, L.down, p.act, act_amax(p, layer), xs, st);
        mark(kind, 1);
        gemv<1>(p, L.down, r0, xs, st.row_scale, red, Epilogue::kResidual, p.h, p.shape.hidden, r0[0]);
        count(phase_counter(p, layer, 4));
        break;
      default: break;
    }
    staged = op == Op::kAttention ? -1 : key;  // attention's state overwrites the staged input
    __syncthreads();  // the next instruction may overwrite shared memory this one reads
    mark(kind, 2);
    if (kProfile && threadIdx.x == 0) ++prof[kind][3];
  }
  flush();
  if constexpr (kProfile) {
    mark(kProfileKinds - 1, 0);
    if (threadIdx.x == 0) ++prof[kProfileKinds - 1][3];
    __syncthreads();
    if (threadIdx.x < kProfileKinds * kProfileParts)
      p.profile[blockIdx.x * kProfileKinds * kProfileParts + threadIdx.x] = (&prof[0][0])[threadIdx.x];
  }
  // The last CTA out zeroes the phase counters and the row amaxes (the merge counters are zeroed
  // by their mergers).
  __shared__ bool s_last;
  unsigned* done = act_amax(p, layers);  // counter_count − 1
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int i = threadIdx.x; i < layers * kPhasesPerLayer; i += kThreads) p.counters[i] = 0;
  for (int i = threadIdx.x; i < 2 * layers * kMaxRows; i += kThreads) attn_amax(p, 0)[i] = 0;
  if (threadIdx.x == 0) *done = 0;
}

template <int kHeadDim, bool kProfile>
void launch_with(const Params& p, int ctas, size_t smem, cudaStream_t stream) {
  static bool configured = false;
  if (!configured) {
    FP8LM_CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<kHeadDim, kProfile>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, int(227 * 1024 - 1024)));
    configured = true;
  }
  decode_kernel<kHeadDim, kProfile><<<ctas, kThreads, smem, stream>>>(p);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t shared_bytes(const ModelShape& shape, int rows, int64_t row_bytes) {
  const size_t staged = size_t(rows) * size_t(shape.hidden) * 2 + size_t(rows) * size_t(row_bytes + 16);
  const int hd = shape.head_dim, group = shape.q_heads / std::max(shape.kv_heads, 1);
  const size_t attention =
      size_t(kMaxGroup * hd + kWarps * (32 / (hd / 8)) * partial_stride(group, hd)) * sizeof(float);
  return size_t(kRedBytes) + std::max(staged, attention);
}

int ctas_per_sm(size_t smem) {
  int n = 0;
  // Both instantiations have the same launch bounds and shared memory; ask for the larger.
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<128, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(227 * 1024 - 1024)));
  FP8LM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_kernel<128, false>, kThreads, smem));
  return n;
}

void launch(const Params& p, int ctas, size_t smem, cudaStream_t stream) {
  if (p.rows < 1 || p.rows > kMaxRows) throw Error("persistent decode: " + std::to_string(p.rows) + " rows");
  const bool profile = p.profile != nullptr;
  switch (p.shape.head_dim) {
    case 32: profile ? launch_with<32, true>(p, ctas, smem, stream) : launch_with<32, false>(p, ctas, smem, stream); break;
    case 64: profile ? launch_with<64, true>(p, ctas, smem, stream) : launch_with<64, false>(p, ctas, smem, stream); break;
    case 128:
      profile ? launch_with<128, true>(p, ctas, smem, stream) : launch_with<128, false>(p, ctas, smem, stream);
      break;
    default: throw Error("persistent decode: head_dim " + std::to_string(p.shape.head_dim) + " is not 32, 64 or 128");
  }
}

}  // namespace fp8lm::cuda::persistent
