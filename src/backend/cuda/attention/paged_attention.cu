// Paged KV-cache stores and paged attention on the GPU; see paged_attention.h for the contract
// and the numerics.
//
// Kernels:
//   store_kv_kernel        one thread per 8 elements of a row's K and V (16-byte loads).
//   row_attention_kernel   the decode / SIMT kernel: one CTA of 4 warps per (row, kv head,
//                          partition), or per (row, kv head) over every partition ("whole"
//                          mode, the SIMT prefill path). A thread group of TG lanes handles one
//                          key: lane c holds elements [8c, 8c + 8) of the key (one 16-byte load
//                          for BF16, two for F32, one 8-byte load for FP8) and the same 8
//                          elements of the GC query heads it serves, in registers. The GC dot
//                          products are summed over the group with a reduce-scatter butterfly
//                          (each step halves the values a lane carries, so GC heads cost about
//                          GC shuffles rather than GC·log2(TG)); scores go to shared memory, a
//                          warp per head takes the max and the exponentials, then each group
//                          accumulates w·v for its keys in registers.
//   reduce_kernel          merges a decode row's partitions (log-sum-exp): the SIMT kernel's
//                          64-position ones or the tensor-core decode kernel's chunks.
//   flash_attention_kernel the tensor-core prefill kernel: 64 packed (token, query head) rows
//                          of one sequence and kv head per CTA (4 warps × 16 rows), 64-key tiles
//                          gathered from the paged cache with cp.async into a double buffer,
//                          S = Q·Kᵀ and O += P·V with mma.sync m16n8k16 (BF16; an FP8 cache's
//                          codes converted to FP16 in registers: attention_mma.cuh), online
//                          softmax in registers.
//   warp_decode_kernel     (paged_attention_decode.cu) the tensor-core decode kernel: decode rows
//                          with head_dim 64 / 128 and a BF16 or FP8 cache, split over the context
//                          where the batch is too small to fill the GPU. What it shares with the
//                          prefill kernel is attention_mma.cuh.
#include "backend/cuda/attention/paged_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "backend/cuda/attention/attention_mma.cuh"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/env_switch.h"
#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/cuda/attention/kv_store_device.cuh"
#include "backend/cuda/common/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

using backend::KvElement;
using namespace attention_detail;

constexpr unsigned kFull = 0xffffffffu;


// ---- Element conversions -------------------------------------------------------------------

// Raw storage of 8 consecutive elements of any element type.
struct Raw8 {
  uint4 a = {0, 0, 0, 0};
  uint4 b = {0, 0, 0, 0};
};

template <KvElement E>
__device__ __forceinline__ Raw8 load_raw8(const void* base, int64_t element) {
  Raw8 r;
  if constexpr (E == KvElement::kF32) {
    const auto* p = reinterpret_cast<const uint4*>(static_cast<const float*>(base) + element);
    r.a = __ldg(p);
    r.b = __ldg(p + 1);
  } else if constexpr (E == KvElement::kBF16) {
    r.a = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + element));
  } else {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(base) + element));
    r.a.x = x.x;
    r.a.y = x.y;
  }
  return r;
}

__device__ __forceinline__ void bf16x2_to_float(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xFFFF0000u);
}


// The 8 elements as exact float32 values (FP8: the code's value, unscaled).
template <KvElement E>
__device__ __forceinline__ void to_float8(const Raw8& r, float (&f)[8]) {
  if constexpr (E == KvElement::kF32) {
    f[0] = __uint_as_float(r.a.x), f[1] = __uint_as_float(r.a.y), f[2] = __uint_as_float(r.a.z);
    f[3] = __uint_as_float(r.a.w), f[4] = __uint_as_float(r.b.x), f[5] = __uint_as_float(r.b.y);
    f[6] = __uint_as_float(r.b.z), f[7] = __uint_as_float(r.b.w);
  } else if constexpr (E == KvElement::kBF16) {
    bf16x2_to_float(r.a.x, f[0], f[1]);
    bf16x2_to_float(r.a.y, f[2], f[3]);
    bf16x2_to_float(r.a.z, f[4], f[5]);
    bf16x2_to_float(r.a.w, f[6], f[7]);
  } else {
    const uint32_t w[2] = {r.a.x, r.a.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 lo = fp8x2_to_float2<E>(w[i]);
      const float2 hi = fp8x2_to_float2<E>(w[i] >> 16);
      f[4 * i] = lo.x, f[4 * i + 1] = lo.y, f[4 * i + 2] = hi.x, f[4 * i + 3] = hi.y;
    }
  }
}

// ---- store_kv ------------------------------------------------------------------------------

struct StoreArgs {
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  int64_t num_rows;
  const int32_t* row_seq;
  const int32_t* row_position;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  int num_kv_heads;
  int head_dim;
  int block_size;
  void* k_cache;
  void* v_cache;
  float k_scale, v_scale;
};

template <KvElement E>
__global__ void __launch_bounds__(256) store_kv_kernel(const StoreArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int per_head = a.head_dim / 8;
  const int per_row = a.num_kv_heads * per_head;  // 8-element chunks per row
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.num_rows * per_row) return;
  const int64_t row = idx / per_row;
  const int c = int(idx % per_row);
  const int64_t pos = a.row_position[row];
  if (pos < 0 || pos >= int64_t(a.max_blocks_per_seq) * a.block_size) return;
  const int64_t seq = a.row_seq[row];
  const int64_t block = a.block_tables[seq * a.max_blocks_per_seq + pos / a.block_size];
  const int h = c / per_head, d = (c % per_head) * 8;
  const int64_t at = kv_cache_index(block, h, a.num_kv_heads, pos, a.block_size, a.head_dim, d);
  const int64_t src = row * per_row * 8 + int64_t(c) * 8;
  store_kv8<E>(a.k_cache, at, __ldg(reinterpret_cast<const uint4*>(a.k + src)), a.k_scale);
  store_kv8<E>(a.v_cache, at, __ldg(reinterpret_cast<const uint4*>(a.v + src)), a.v_scale);
}

// ---- Decode / SIMT attention ---------------------------------------------------------------

constexpr int kRowWarps = 4;
constexpr int kRowThreads = kRowWarps * 32;
constexpr int kScoreStride = kDecodePartition + 1;  // floats per head's scores (padded: no bank conflicts)

struct RowArgs {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const int32_t* row_seq;
  const int32_t* seq_first_row;
  const int32_t* seq_num_tokens;
  const int32_t* seq_start_position;
  const int32_t* block_tables;
  int max_blocks_per_seq;
  const void* k;
  const void* v;
  int num_heads, num_kv_heads, group, head_dim, block_size;
  int64_t window;     // ≤ 0: none
  float score_scale;  // scale (× k_scale for FP8)
  float v_scale;      // FP8 v_scale, else 1
  bool split;         // one partition per CTA (decode rows) or all of them (long rows)
  int parts;          // partitions per row in the grid (split mode)
  int tcap;           // decode slots per sequence: min(max_new_tokens, kDecodeMaxNewTokens)
  int seq_base;       // split mode: the first sequence of this launch (slots count from it)
  int partition;      // positions per partition (the reduce kernel): kDecodePartition, or the
                      // tensor-core decode kernel's keys per chunk
  float* part_o;      // [slot][head][part][head_dim]
  float* part_m;      // [slot][head][part]
  float* part_l;
  unsigned* merge_counters;  // [slot][kv head], or null: the reduce kernel merges
  bool prefetch;             // split mode: prefetch_cached_kv before the wait
};

// Sums v[0..GC) over the TG lanes of a thread group, scattering the results: after the call
// the lane holds the sums of heads head … head + max(1, GC / TG) − 1 in v[0 …]. Each step
// exchanges half the values still carried with the partner lane (lane ^ M) and keeps the other
// half; once one value is left, plain butterfly steps finish the sum.
template <int C, int M, int GC>
__device__ __forceinline__ void reduce_scatter(float (&v)[GC], int lane, int& head) {
  if constexpr (M >= 1) {
    if constexpr (C > 1) {
      const bool hi = (lane & M) != 0;
#pragma unroll
      for (int i = 0; i < C / 2; ++i) {
        const float send = hi ? v[i] : v[i + C / 2];
        const float keep = hi ? v[i + C / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(kFull, send, M);
      }
      if (hi) head += C / 2;
      reduce_scatter<C / 2, M / 2, GC>(v, lane, head);
    } else {
      v[0] += __shfl_xor_sync(kFull, v[0], M);
      reduce_scatter<1, M / 2, GC>(v, lane, head);
    }
  }
}

// Split mode, before the kernel waits for the one before it: brings the partition's K and V of
// positions the earlier steps stored (before seq_start_position) into L2, so that the loads
// after the wait find them there. Only the step's metadata (copied in before its first kernel)
// and those positions are read (launch.cuh's contract); the new rows' K and V come from the
// kernel before, and are read after the wait.
template <KvElement E>
__device__ void prefetch_cached_kv(const RowArgs& a) {
  const int slot = int(blockIdx.x / unsigned(a.parts)), part = int(blockIdx.x % unsigned(a.parts));
  const int seq = a.seq_base + slot / a.tcap, t = slot % a.tcap;
  const int n = a.seq_num_tokens[seq];
  if (n > kDecodeMaxNewTokens || t >= n) return;
  const int64_t start = a.seq_start_position[seq];
  const int64_t pos = start + t;
  const int64_t lo = max(window_lo(pos, a.window), int64_t(part) * kDecodePartition);
  const int64_t hi = min(start, int64_t(part + 1) * kDecodePartition) - 1;  // cached positions only
  if (hi < lo) return;
  const int kvh = int(blockIdx.y);
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const int row_bytes = a.head_dim * kElemBytes<E>;  // one position of one KV head: contiguous
  const int lines = (row_bytes + 127) / 128;
  const int total = int(hi - lo + 1) * lines;
  for (int i = int(threadIdx.x); i < total; i += kRowThreads) {
    const int64_t j = lo + i / lines;
    const int64_t block = table[j / a.block_size];
    const int64_t at = ((block * a.num_kv_heads + kvh) * a.block_size + j % a.block_size) * row_bytes + (i % lines) * 128;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(a.k) + at));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(a.v) + at));
  }
}

// Writes head h of decode slot `slot` (output row `row`), one warp: merge_partials_warp over its
// partitions [p_lo, p_hi].
__device__ void merge_head_warp(const RowArgs& a, int slot, int h, int64_t row, int p_lo, int p_hi, int lane) {
  merge_partials_warp(a.part_o, a.part_m, a.part_l, (int64_t(slot) * a.num_heads + h) * a.parts, p_lo, p_hi,
                      a.head_dim, a.v_scale, a.out + (row * a.num_heads + h) * a.head_dim, lane);
}

// E: cache element; TG: lanes per key (a power of two ≥ head_dim / 8); GC: query heads per pass.
template <KvElement E, int TG, int GC>
__global__ void __launch_bounds__(kRowThreads) row_attention_kernel(const RowArgs a) {
  if (a.split && a.prefetch) prefetch_cached_kv<E>(a);
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it (but the prefetch's reads)
  pdl_release();
  extern __shared__ float smem[];  // scores [GC][kScoreStride]; at the end [kRowWarps][GC][head_dim]
  __shared__ float sh_m[GC], sh_l[GC], sh_alpha[GC];
  __shared__ bool s_last;
  constexpr int kGroups = 32 / TG;                  // keys per warp per pass
  constexpr int kKeysPerPass = kGroups * kRowWarps;  // keys per CTA per pass
  constexpr int kPlain = TG > GC ? TG / GC : 1;     // lanes ending with the same sums
  constexpr int kHeld = GC > TG ? GC / TG : 1;      // sums each of them holds
  // Every key and value of a partition is loaded in one go, before any of them
  // is used: a partition costs one memory round trip, not one per few keys.
  // (Measured at batch 256: no faster than two keys in flight, so the per-CTA
  // fixed cost dominates there; large decode batches take the tensor-core kernel.)
  constexpr int kUnroll = (kDecodePartition + kKeysPerPass - 1) / kKeysPerPass;

  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int c = lane % TG, grp = lane / TG;
  const int kvh = int(blockIdx.y);

  int seq = 0, t = 0, slot = 0, part = 0;
  if (a.split) {
    slot = int(blockIdx.x / unsigned(a.parts));
    part = int(blockIdx.x % unsigned(a.parts));
    seq = a.seq_base + slot / a.tcap;
    t = slot % a.tcap;
    const int n = a.seq_num_tokens[seq];
    if (n > kDecodeMaxNewTokens || t >= n) return;
  } else {
    const int64_t r = blockIdx.x;
    seq = a.row_seq[r];
    if (a.seq_num_tokens[seq] <= kDecodeMaxNewTokens) return;  // the split launch's row
    t = int(r - a.seq_first_row[seq]);
  }
  const int64_t row = int64_t(a.seq_first_row[seq]) + t;
  const int64_t pos = int64_t(a.seq_start_position[seq]) + t;
  const int64_t lo = window_lo(pos, a.window);
  const int p_lo = int(lo / kDecodePartition), p_hi = int(pos / kDecodePartition);
  int first = p_lo, last = p_hi;
  if (a.split) {
    if (part < p_lo || part > p_hi) return;  // nothing of this row here (grids cover max_context)
    first = last = part;
  }
  const bool direct = !a.split || p_lo == p_hi;  // the only partition: write the output itself
  const int hd = a.head_dim, chunks = hd / 8;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const int64_t q_stride = int64_t(a.num_heads) * hd;
  auto key_at = [&](int64_t j) {
    const int64_t block = table[j / a.block_size];
    return ((block * a.num_kv_heads + kvh) * a.block_size + j % a.block_size) * hd + c * 8;
  };

  for (int hc = 0; hc < a.group; hc += GC) {
    if (tid < GC) {
      sh_m[tid] = -INFINITY;
      sh_l[tid] = 0.0f;
    }
    float q[GC][8];
#pragma unroll
    for (int gi = 0; gi < GC; ++gi) {
      Raw8 r;
      if (hc + gi < a.group && c < chunks)
        r = load_raw8<KvElement::kBF16>(a.q, row * q_stride + (int64_t(kvh) * a.group + hc + gi) * hd + c * 8);
      to_float8<KvElement::kBF16>(r, q[gi]);
    }
    float acc[GC][8];
#pragma unroll
    for (int gi = 0; gi < GC; ++gi)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[gi][e] = 0.0f;

    for (int pi = first; pi <= last; ++pi) {
      const int64_t j0 = lo > int64_t(pi) * kDecodePartition ? lo : int64_t(pi) * kDecodePartition;
      const int64_t j_end = pos < int64_t(pi + 1) * kDecodePartition - 1 ? pos : int64_t(pi + 1) * kDecodePartition - 1;
      const int nk = int(j_end - j0 + 1);

      // 1. Scores of the partition's keys (warp-uniform: every lane joins the shuffles).
      // Keys kk = warp·kGroups + u·kKeysPerPass + grp; the values are loaded
      // here too, so that they arrive while the scores and softmax are computed.
      const int base = warp * kGroups;
      Raw8 vr[kUnroll];
      {
        Raw8 r[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int kk = base + u * kKeysPerPass + grp;
          if (kk < nk && c < chunks) r[u] = load_raw8<E>(a.k, key_at(j0 + kk));
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int kk = base + u * kKeysPerPass + grp;
          if (kk < nk && c < chunks) vr[u] = load_raw8<E>(a.v, key_at(j0 + kk));
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          float kf[8];
          to_float8<E>(r[u], kf);
          float dot[GC];
#pragma unroll
          for (int gi = 0; gi < GC; ++gi) {
            float s = q[gi][0] * kf[0];
#pragma unroll
            for (int e = 1; e < 8; ++e) s = fmaf(q[gi][e], kf[e], s);
            dot[gi] = s;
          }
          int head = 0;
          reduce_scatter<GC, TG / 2, GC>(dot, lane, head);
          const int kk = base + u * kKeysPerPass + grp;
          if (kk < nk && c % kPlain == 0) {
#pragma unroll
            for (int i = 0; i < kHeld; ++i) smem[(head + i) * kScoreStride + kk] = dot[i] * a.score_scale;
          }
        }
      }
      __syncthreads();

      // 2. Softmax weights against the running maximum; a warp per head.
      for (int gi = warp; gi < GC; gi += kRowWarps) {
        float* s = smem + gi * kScoreStride;
        float mx = -INFINITY;
        for (int kk = lane; kk < nk; kk += 32) mx = fmaxf(mx, s[kk]);
        mx = warp_max(mx);
        const float m_old = sh_m[gi];
        const float m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
        for (int kk = lane; kk < nk; kk += 32) {
          const float w = expf(s[kk] - m_new);
          s[kk] = w;
          sum += w;
        }
        sum = warp_sum(sum);
        if (lane == 0) {
          const float alpha = expf(m_old - m_new);  // 0 for the first partition (m_old = −inf)
          sh_alpha[gi] = alpha;
          sh_l[gi] = sh_l[gi] * alpha + sum;
          sh_m[gi] = m_new;
        }
      }
      __syncthreads();

      // 3. acc = acc·alpha + Σ w·v over the group's keys.
#pragma unroll
      for (int gi = 0; gi < GC; ++gi) {
        const float alpha = sh_alpha[gi];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[gi][e] *= alpha;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int kk = base + u * kKeysPerPass + grp;
        if (kk < nk && c < chunks) {
          float vf[8];
          to_float8<E>(vr[u], vf);
#pragma unroll
          for (int gi = 0; gi < GC; ++gi) {
            const float w = smem[gi * kScoreStride + kk];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[gi][e] = fmaf(w, vf[e], acc[gi][e]);
          }
        }
      }
      __syncthreads();  // scores are overwritten next
    }

    // 4. Sum the groups of each warp, then the warps in order, and write.
#pragma unroll
    for (int m = TG; m < 32; m *= 2)
#pragma unroll
      for (int gi = 0; gi < GC; ++gi)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[gi][e] += __shfl_xor_sync(kFull, acc[gi][e], m);
    float* red = smem;
    if (grp == 0 && c < chunks) {
#pragma unroll
      for (int gi = 0; gi < GC; ++gi)
#pragma unroll
        for (int e = 0; e < 8; ++e) red[(warp * GC + gi) * hd + c * 8 + e] = acc[gi][e];
    }
    __syncthreads();
    for (int idx = tid; idx < GC * hd; idx += kRowThreads) {
      const int gi = idx / hd, d = idx % hd;
      if (hc + gi >= a.group) continue;
      float o = red[gi * hd + d];
#pragma unroll
      for (int w = 1; w < kRowWarps; ++w) o += red[(w * GC + gi) * hd + d];
      const int h = kvh * a.group + hc + gi;
      if (direct) {
        a.out[row * q_stride + int64_t(h) * hd + d] = __float2bfloat16_rn((o * a.v_scale) / sh_l[gi]);
      } else {
        const int64_t at = (int64_t(slot) * a.num_heads + h) * a.parts + part;
        a.part_o[at * hd + d] = o;
        if (d == 0) {
          a.part_m[at] = sh_m[gi];
          a.part_l[at] = sh_l[gi];
        }
      }
    }
    __syncthreads();
  }
  if (direct) return;
  if (a.merge_counters == nullptr) return;

  // The last of the row's p_hi − p_lo + 1 CTAs of this KV head to finish merges its heads
  // (a warp per head) and leaves the counter at zero for the next call.
  unsigned* counter = a.merge_counters + int64_t(slot) * a.num_kv_heads + kvh;
  __threadfence();
  __syncthreads();
  if (tid == 0) s_last = atomicAdd(counter, 1u) == unsigned(p_hi - p_lo);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int gi = warp; gi < a.group; gi += kRowWarps) merge_head_warp(a, slot, kvh * a.group + gi, row, p_lo, p_hi, lane);
  if (tid == 0) *counter = 0;
}

// Merges the partitions of the decode rows that have more than one: one warp per (slot, head).
__global__ void __launch_bounds__(32) reduce_kernel(const RowArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int slot = int(blockIdx.x), h = int(blockIdx.y);
  const int seq = a.seq_base + slot / a.tcap, t = slot % a.tcap;
  const int n = a.seq_num_tokens[seq];
  if (n > kDecodeMaxNewTokens || t >= n) return;
  const int64_t pos = int64_t(a.seq_start_position[seq]) + t;
  const int p_lo = int(window_lo(pos, a.window) / a.partition), p_hi = int(pos / a.partition);
  if (p_lo == p_hi) return;  // written directly
  const int64_t row = int64_t(a.seq_first_row[seq]) + t;
  merge_head_warp(a, slot, h, row, p_lo, p_hi, int(threadIdx.x));
}

// ---- Tensor-core prefill -------------------------------------------------------------------

constexpr int kBM = 64;  // packed (token, query head) rows per CTA


// Shared memory of one CTA (bytes). BF16 tiles have rows of HD + 8 elements (16 bytes of padding:
// ldmatrix's 8 row addresses fall in different bank groups); FP8 tiles rows of HD codes, their
// 16-byte pieces swizzled (fp8_piece) to the same end.
template <int HD, KvElement E>
struct FlashSmem {
  static constexpr bool kFp8 = kIsFp8<E>;
  static constexpr int kStride = HD + 8;                    // bf16 elements per Q row
  static constexpr int kRawRow = kFp8 ? HD : kStride * 2;   // bytes per key in a load stage
  static constexpr int kStage = kBN * kRawRow;              // one K or V load stage
  static constexpr int kQ = 0;
  static constexpr int kStages = kBM * kStride * 2;         // [2 stages][K, V]
  static constexpr int kBytes = kStages + 4 * kStage;
};

// Each warp takes 16 of the CTA's 64 packed rows over every key tile. Compiled for one CTA an SM
// (__launch_bounds__): the compiler takes 230–240 registers at HD = 128 (two CTAs an SM). The
// HD = 128 FP8 form compiled for three CTAs an SM (≤ 168 registers, 72 bytes of spills), for
// short prompts whose CTAs hold one or two key tiles, measured +0.3 % at 128/128, within the
// spread (docs/results/issue19/README.md, session 10), and was retired in issue 40.
template <int HD, KvElement E>
__global__ void __launch_bounds__(kFlashThreads, 1) flash_attention_kernel(const FlashArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  using S = FlashSmem<HD, E>;
  constexpr int kRows = kBM;  // packed rows per CTA
  constexpr int kWarpKeys = kBN;  // keys of a tile per warp
  extern __shared__ __align__(16) unsigned char fsmem[];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int seq = int(blockIdx.x / unsigned(a.tiles));
  const int tile = a.tiles - 1 - int(blockIdx.x % unsigned(a.tiles));  // longest tiles first
  const int n = a.seq_num_tokens[seq];
  if (n <= a.decode_max_new_tokens) return;  // the decode kernel's
  const int G = a.group;
  const int rows_total = n * G;
  const int r0 = tile * kRows;
  const int warp_row = warp * 16;  // the warp's first row in the CTA
  const int warp_key = 0;          // the warp's first key in a tile
  if (r0 >= rows_total) return;
  const int kvh = int(blockIdx.y);
  const int64_t start = a.seq_start_position[seq];
  const int64_t first_row = a.seq_first_row[seq];
  const int r_end = r0 + kRows < rows_total ? r0 + kRows : rows_total;
  const int64_t p_first = start + r0 / G, p_last = start + (r_end - 1) / G;
  const int64_t lo_first = window_lo(p_first, a.window), lo_last = window_lo(p_last, a.window);
  const bool partial_rows = r_end - r0 < kRows;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const int64_t q_stride = int64_t(a.num_heads) * HD;

  // This thread's rows: fragment rows lane / 4 and lane / 4 + 8 of its warp's 16.
  const LaneRows rows = lane_rows(r0 + warp_row + lane / 4, 8, rows_total, G, start, a.window);
  const auto &pos_r = rows.pos, &lo_r = rows.lo;
  const auto &tok_r = rows.tok, &head_r = rows.head;
  const auto& ok_r = rows.ok;

  // Q tile (zeros past the sequence's rows); joins the first K/V copy group.
  {
    constexpr int kCpr = HD / 8;
    for (int idx = tid; idx < kRows * kCpr; idx += kFlashThreads) {
      const int r = idx / kCpr, ch = idx % kCpr, gr = r0 + r;
      const bool ok = gr < rows_total;
      const __nv_bfloat16* src = a.q;
      if (ok) src = a.q + (first_row + gr / G) * q_stride + (int64_t(kvh) * G + gr % G) * HD + ch * 8;
      cp_async16(smem_addr(fsmem + S::kQ + (r * S::kStride + ch * 8) * 2), src, ok ? 16 : 0);
    }
  }
  // Keys [lo_first, p_last] are gathered; others in a tile are zero-filled without touching
  // the block table (blocks outside a sliding window may already be someone else's).
  auto load_kv = [&](int stage, int64_t jt) {
    constexpr int kCpr = HD * kElemBytes<E> / 16;
    unsigned char* kdst = fsmem + S::kStages + 2 * stage * S::kStage;
    unsigned char* vdst = kdst + S::kStage;
    for (int idx = tid; idx < kBN * kCpr; idx += kFlashThreads) {
      const int key = idx / kCpr, ch = idx % kCpr;
      const int64_t j = jt * kBN + key;
      const bool ok = j >= lo_first && j <= p_last;
      int64_t off = 0;
      if (ok) {
        const int64_t block = table[j / a.block_size];
        off = ((block * a.num_kv_heads + kvh) * a.block_size + j % a.block_size) * HD * kElemBytes<E> + ch * 16;
      }
      const int at = key * S::kRawRow + (S::kFp8 ? fp8_piece<HD>(key, ch) : ch) * 16;
      cp_async16(smem_addr(kdst + at), static_cast<const unsigned char*>(a.k) + off, ok ? 16 : 0);
      cp_async16(smem_addr(vdst + at), static_cast<const unsigned char*>(a.v) + off, ok ? 16 : 0);
    }
  };

  float o[HD / 8][4];
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
  uint32_t qf[HD / 16][4];
  float scale_r[2] = {a.score_scale, a.score_scale};  // FP8: per row (fp8_q_fragments)

  const int64_t jt_first = lo_first / kBN, jt_last = p_last / kBN;
  const int ntiles = int(jt_last - jt_first + 1);
  load_kv(0, jt_first);
  cp_async_commit();
  for (int it = 0; it < ntiles; ++it) {
    const int64_t jt = jt_first + it;
    if (it + 1 < ntiles) {
      load_kv((it + 1) & 1, jt + 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (it == 0) {
      if constexpr (S::kFp8) {
        fp8_q_fragments<HD, S::kStride>(fsmem + S::kQ + warp_row * S::kStride * 2, lane, a.score_scale, qf, scale_r);
      } else {
#pragma unroll
        for (int ks = 0; ks < HD / 16; ++ks)
          ldmatrix_x4(qf[ks], smem_addr(fsmem + S::kQ + ((warp_row + (lane & 15)) * S::kStride + ks * 16 + (lane >> 4) * 8) * 2));
      }
    }
    const unsigned char* kb = fsmem + S::kStages + 2 * (it & 1) * S::kStage;
    const unsigned char* vb = kb + S::kStage;
    const int64_t jtile = jt * kBN;
    const bool full = !partial_rows && jtile >= lo_last && jtile + kBN - 1 <= p_first;
    if constexpr (S::kFp8) {
      attend_tile_fp8<HD, E, kWarpKeys>(kb, vb, warp_key, qf, scale_r, full, jtile + warp_key, lo_r, pos_r, lane, m_r,
                                        l_r, o);
    } else {
      attend_tile<HD, kWarpKeys, S::kStride>(kb, vb, warp_key, qf, a.score_scale, full, jtile + warp_key, lo_r, pos_r,
                                             lane, m_r, l_r, o);
    }
    __syncthreads();  // the next iteration refills this stage
  }

  write_attention_rows<HD, S::kFp8>(a, first_row, kvh, ok_r, tok_r, head_r, lane, l_r, o);
}

// ---- Host side -----------------------------------------------------------------------------

[[noreturn]] void fail(const char* op, const std::string& what) { throw Error(std::string("cuda ") + op + ": " + what); }

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_layer(const char* op, const DeviceKvLayer& layer) {
  const KvElement e = layer.element;
  if (e != KvElement::kF32 && e != KvElement::kBF16 && !is_fp8(e))
    fail(op, "unknown kv element type " + std::to_string(int(e)));
  if (layer.k == nullptr || layer.v == nullptr) fail(op, "null kv cache k or v");
  if (!aligned16(layer.k) || !aligned16(layer.v)) fail(op, "kv cache k and v must be 16-byte aligned");
  if (is_fp8(e)) {
    for (const auto& [name, scale] : {std::pair{"k_scale", layer.k_scale}, std::pair{"v_scale", layer.v_scale}}) {
      if (!std::isfinite(scale) || !(scale > 0.0f))
        fail(op, std::string(name) + " must be finite and > 0, got " + std::to_string(scale));
    }
  }
}

void check_head_dim(const char* op, int64_t head_dim) {
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
    fail(op, "head_dim must be a multiple of 8 in [8, 256], got " + std::to_string(head_dim));
}

void check_grid(const char* op, const char* what, int64_t blocks) {
  if (blocks > std::numeric_limits<int32_t>::max())
    fail(op, std::string(what) + " needs " + std::to_string(blocks) + " thread blocks, more than a grid holds");
}

struct Plan {
  int group = 1;
  int tcap = 0;   // decode slots per sequence
  int parts = 0;  // partitions per decode row in the grid
  int64_t slots = 0;
  int64_t group_seqs = 0;  // sequences per split launch: the workspace holds this many
  bool prefill = false;  // rows with > kDecodeMaxNewTokens new tokens may exist
  size_t workspace = 0;
  size_t part_o_floats = 0, part_ml_floats = 0;  // of one launch
};

Plan make_plan(const DeviceAttentionBatch& b, const backend::AttentionParams& p) {
  Plan plan;
  plan.group = p.num_kv_heads > 0 ? p.num_heads / p.num_kv_heads : 1;
  plan.tcap = std::min(b.max_new_tokens, kDecodeMaxNewTokens);
  plan.parts = int(cdiv(std::max(b.max_context, 1), kDecodePartition));
  plan.slots = int64_t(b.num_seqs) * plan.tcap;
  plan.group_seqs = b.num_seqs;
  plan.prefill = b.max_new_tokens > kDecodeMaxNewTokens;
  if (plan.parts > 1 && plan.slots > 0) {
    // The partials grow with sequences × slots × partitions of the longest
    // context; past the cap the sequences are split over several launches that
    // reuse one workspace, so that no batch needs more than the cap (and the
    // KV-cache sizing can count on it).
    const size_t per_seq = size_t(plan.tcap) * size_t(p.num_heads) * size_t(plan.parts) * (size_t(p.head_dim) + 2) * 4;
    plan.group_seqs = std::clamp<int64_t>(int64_t(kAttentionWorkspaceCap / per_seq), 1, b.num_seqs);
    plan.part_ml_floats = size_t(plan.group_seqs) * size_t(plan.tcap) * size_t(p.num_heads) * size_t(plan.parts);
    plan.part_o_floats = plan.part_ml_floats * size_t(p.head_dim);
    const auto up16 = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
    plan.workspace = up16(plan.part_o_floats * 4) + 2 * up16(plan.part_ml_floats * 4);
  }
  return plan;
}

void check_attention(const __nv_bfloat16* q, const __nv_bfloat16* out, const DeviceAttentionBatch& b,
                     const backend::AttentionParams& p, int block_size, const DeviceKvLayer& layer,
                     const void* workspace, size_t workspace_bytes) {
  const char* op = "paged attention";
  if (p.num_heads <= 0 || p.num_kv_heads <= 0)
    fail(op, "num_heads and num_kv_heads must be > 0, got " + std::to_string(p.num_heads) + " and " +
                 std::to_string(p.num_kv_heads));
  if (p.num_heads % p.num_kv_heads != 0)
    fail(op, "num_heads " + std::to_string(p.num_heads) + " is not a multiple of num_kv_heads " +
                 std::to_string(p.num_kv_heads));
  if (p.num_kv_heads > 65535 || p.num_heads > 65535) fail(op, "more than 65535 heads");
  check_head_dim(op, p.head_dim);
  if (!std::isfinite(p.scale)) fail(op, "scale must be finite, got " + std::to_string(p.scale));
  if (p.sliding_window && *p.sliding_window < 1)
    fail(op, "sliding_window must be >= 1, got " + std::to_string(*p.sliding_window));
  if (block_size <= 0) fail(op, "block_size must be > 0, got " + std::to_string(block_size));
  check_layer(op, layer);
  if (b.num_rows < 0 || b.num_seqs < 0)
    fail(op, "num_rows and num_seqs must be >= 0, got " + std::to_string(b.num_rows) + " and " +
                 std::to_string(b.num_seqs));
  if (b.num_rows == 0) return;
  if (b.num_seqs == 0) fail(op, std::to_string(b.num_rows) + " rows but no sequences");
  if (b.num_rows > std::numeric_limits<int32_t>::max()) fail(op, "num_rows " + std::to_string(b.num_rows) + " exceeds 2^31 - 1");
  if (q == nullptr || out == nullptr) fail(op, "null q or out");
  if (!aligned16(q) || !aligned16(out)) fail(op, "q and out must be 16-byte aligned");
  if (b.row_seq == nullptr || b.seq_first_row == nullptr || b.seq_num_tokens == nullptr ||
      b.seq_start_position == nullptr || b.block_tables == nullptr)
    fail(op, "null batch metadata (row_seq, seq_first_row, seq_num_tokens, seq_start_position or block_tables)");
  if (b.max_new_tokens < 1) fail(op, "max_new_tokens must be >= 1, got " + std::to_string(b.max_new_tokens));
  if (b.max_context < 1) fail(op, "max_context must be >= 1, got " + std::to_string(b.max_context));
  if (int64_t(b.max_blocks_per_seq) < cdiv(b.max_context, block_size))
    fail(op, "max_blocks_per_seq " + std::to_string(b.max_blocks_per_seq) + " cannot hold max_context " +
                 std::to_string(b.max_context) + " positions in blocks of " + std::to_string(block_size));
  const Plan plan = make_plan(b, p);
  check_grid(op, "the decode kernel", plan.group_seqs * plan.tcap * plan.parts);
  if (plan.prefill) check_grid(op, "the prefill kernel", int64_t(b.num_seqs) * cdiv(int64_t(b.max_new_tokens) * plan.group, kBM));
  if (workspace_bytes < plan.workspace)
    fail(op, "workspace of " + std::to_string(workspace_bytes) + " bytes, " + std::to_string(plan.workspace) +
                 " needed (paged_attention_workspace_bytes)");
  if (plan.workspace > 0 && (workspace == nullptr || !aligned16(workspace)))
    fail(op, "workspace must be non-null and 16-byte aligned");
}

template <KvElement E, int TG, int GC>
void launch_rows(const RowArgs& a, unsigned blocks, cudaStream_t stream) {
  const int floats = std::max(GC * kScoreStride, kRowWarps * GC * a.head_dim);
  launch_dependent(row_attention_kernel<E, TG, GC>, dim3(blocks, unsigned(a.num_kv_heads)), kRowThreads, size_t(floats) * 4, stream, a);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

template <KvElement E, int TG>
void launch_rows_gc(const RowArgs& a, unsigned blocks, cudaStream_t stream) {
  if (a.group <= 1) launch_rows<E, TG, 1>(a, blocks, stream);
  else if (a.group <= 2) launch_rows<E, TG, 2>(a, blocks, stream);
  else if (a.group <= 4) launch_rows<E, TG, 4>(a, blocks, stream);
  else launch_rows<E, TG, 8>(a, blocks, stream);
}

template <KvElement E>
void launch_rows_tg(const RowArgs& a, unsigned blocks, cudaStream_t stream) {
  const int chunks = a.head_dim / 8;
  if (chunks <= 4) launch_rows_gc<E, 4>(a, blocks, stream);
  else if (chunks <= 8) launch_rows_gc<E, 8>(a, blocks, stream);
  else if (chunks <= 16) launch_rows_gc<E, 16>(a, blocks, stream);
  else launch_rows_gc<E, 32>(a, blocks, stream);
}

void launch_rows_any(KvElement e, const RowArgs& a, unsigned blocks, cudaStream_t stream) {
  switch (e) {
    case KvElement::kF32: launch_rows_tg<KvElement::kF32>(a, blocks, stream); break;
    case KvElement::kBF16: launch_rows_tg<KvElement::kBF16>(a, blocks, stream); break;
    case KvElement::kE4M3: launch_rows_tg<KvElement::kE4M3>(a, blocks, stream); break;
    case KvElement::kE5M2: launch_rows_tg<KvElement::kE5M2>(a, blocks, stream); break;
    // check_layer has refused any other element; a new one is refused here too, never skipped.
    default: fail("paged attention", "unknown kv element type " + std::to_string(int(e)));
  }
}

template <int HD, KvElement E>
void launch_flash(const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  constexpr int kBytes = FlashSmem<HD, E>::kBytes;
  auto* kernel = flash_attention_kernel<HD, E>;
  // A host call (not a stream operation: allowed while capturing a graph), per device.
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  launch_dependent(kernel, dim3(blocks, unsigned(a.num_kv_heads)), kFlashThreads, kBytes, stream, a);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void launch_flash_e(KvElement e, const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  switch (e) {
    case KvElement::kBF16: launch_flash<HD, KvElement::kBF16>(a, blocks, stream); break;
    case KvElement::kE4M3: launch_flash<HD, KvElement::kE4M3>(a, blocks, stream); break;
    case KvElement::kE5M2: launch_flash<HD, KvElement::kE5M2>(a, blocks, stream); break;
    case KvElement::kF32: fail("paged attention", "no tensor-core path for an f32 cache");
    default: fail("paged attention", "no tensor-core path for kv element type " + std::to_string(int(e)));
  }
}

// The current device's SM count (asked once per device).
int sm_count() {
  static std::atomic<int> counts[64] = {};
  int dev = 0;
  FP8LM_CUDA_CHECK(cudaGetDevice(&dev));
  int n = dev >= 0 && dev < 64 ? counts[dev].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    FP8LM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev >= 0 && dev < 64) counts[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

// The tensor-core decode kernel's CTAs per SM below which it splits the context into chunks (two
// waves of two CTAs an SM). Measured on the H200 (Llama-3.1-8B, 1k context): 8 was slower at
// batches 8–128 (BF16 55.6 / 83.7 / 129.2 / 214.7 µs; docs/results/issue19/README.md, session 7).
constexpr int64_t kDecodeCtasPerSm = 4;

// The fewest (sequence, KV head) pairs an SM for which the decode rows of an FP8 cache take the
// warp-per-pair kernel (paged_attention_decode_pairs.cu): 12 (three CTAs of four pairs).
// Measured on the H200 (Llama-3.1-8B, E4M3, docs/benchmarks.md): at 2,048 pairs (batch 256) and
// more it beats the key-split CTAs at 1k context (145 against 224 µs) and at 192 positions
// (39.5 against 85.3 µs; batch 1,024: 120.7 against 290.1); fewer pairs were not measured, so
// they keep the key-split CTAs and their context split. DecodeKernelChoice forces either kernel
// (tests, bench_cuda_attention --decode-kernel).
constexpr int64_t kDecodePairsPerSm = 12;

// The decode kernels' rows per sequence: the decodes' own bound where the host gave one (0: no
// decode rows), else every sequence's up to kDecodeMaxNewTokens.
int decode_tcap(const DeviceAttentionBatch& batch, int plan_tcap) {
  return batch.max_decode_new_tokens >= 0 ? std::min(batch.max_decode_new_tokens, plan_tcap) : plan_tcap;
}

// Whether the decode rows fit the pair kernel's transposed tiles (decode_mma_t.cuh): an FP8 cache,
// and every decoding sequence's rows (tcap tokens × a group) within the MMA's N of kDecodeTRows.
bool decode_rows_fit_pairs(KvElement element, int64_t tcap, int64_t group) {
  return is_fp8(element) && tcap * group <= kDecodeTRows;
}

}  // namespace

bool paged_attention_decode_uses_mma(const DeviceAttentionBatch& batch, const backend::AttentionParams& params,
                                     KvElement element) {
  // FP8LM_CUDA_DECODE_SPLIT=0 (A/B): small batches back on the split SIMT kernel. With the
  // context split on, the SIMT kernel keeps the steps of fewer than kDecodeMmaMinPairs (sequence,
  // KV head) pairs: there its one launch of many small CTAs beats the tensor-core kernel's
  // (H200, 8 KV heads, 1k context, µs SIMT / tensor cores: batch 1 BF16 19.8 / 23.7, E4M3 18.3 /
  // 24.1; batch 4 35.2 / 39.1, 29.4 / 36.1; batch 8 54.1 / 42.3, 40.1 / 37.1: docs/benchmarks.md).
  constexpr int64_t kDecodeMmaMinPairs = 64;
  static const bool split = env_switch_on("FP8LM_CUDA_DECODE_SPLIT");
  const int64_t pairs = int64_t(batch.num_seqs) * params.num_kv_heads;
  return paged_attention_prefill_uses_mma(params.head_dim, element) &&
         ((split && pairs >= kDecodeMmaMinPairs) || pairs >= 2 * int64_t(sm_count()));
}

bool paged_attention_decode_uses_pairs(const DeviceAttentionBatch& batch, const backend::AttentionParams& params,
                                       KvElement element, DecodeKernelChoice choice) {
  if (choice == DecodeKernelChoice::kKeySplit) return false;
  if (!is_fp8(element) || !paged_attention_decode_uses_mma(batch, params, element)) return false;
  const int tcap = decode_tcap(batch, std::min(batch.max_new_tokens, kDecodeMaxNewTokens));
  return tcap > 0 && decode_rows_fit_pairs(element, tcap, params.num_heads / params.num_kv_heads) &&
         (choice == DecodeKernelChoice::kPairs ||
          int64_t(batch.num_seqs) * params.num_kv_heads >= kDecodePairsPerSm * sm_count());
}

bool paged_attention_prefill_uses_mma(int64_t head_dim, KvElement element) {
  return (head_dim == 64 || head_dim == 128) && element != KvElement::kF32;
}

void store_kv(const __nv_bfloat16* k, const __nv_bfloat16* v, const DeviceAttentionBatch& batch, int num_kv_heads,
              int64_t head_dim, int block_size, const DeviceKvLayer& layer, cudaStream_t stream) {
  const char* op = "store_kv";
  if (num_kv_heads <= 0) fail(op, "num_kv_heads must be > 0, got " + std::to_string(num_kv_heads));
  check_head_dim(op, head_dim);
  if (block_size <= 0) fail(op, "block_size must be > 0, got " + std::to_string(block_size));
  check_layer(op, layer);
  if (batch.num_rows < 0) fail(op, "num_rows must be >= 0, got " + std::to_string(batch.num_rows));
  if (batch.num_rows == 0) return;
  if (k == nullptr || v == nullptr) fail(op, "null k or v");
  if (!aligned16(k) || !aligned16(v)) fail(op, "k and v must be 16-byte aligned");
  if (batch.row_seq == nullptr || batch.row_position == nullptr || batch.block_tables == nullptr)
    fail(op, "null batch metadata (row_seq, row_position or block_tables)");
  if (batch.max_blocks_per_seq <= 0)
    fail(op, "max_blocks_per_seq must be > 0, got " + std::to_string(batch.max_blocks_per_seq));
  const int64_t per_row = int64_t(num_kv_heads) * head_dim / 8;
  if (per_row > std::numeric_limits<int32_t>::max()) fail(op, "rows too wide");
  constexpr int kThreads = 256;
  const int64_t blocks = cdiv(batch.num_rows * per_row, kThreads);
  check_grid(op, "the store", blocks);

  StoreArgs a{k, v, batch.num_rows, batch.row_seq, batch.row_position, batch.block_tables, batch.max_blocks_per_seq,
              num_kv_heads, int(head_dim), block_size, layer.k, layer.v, layer.k_scale, layer.v_scale};
  const unsigned grid = unsigned(blocks);
  switch (layer.element) {
    case KvElement::kF32: launch_dependent(store_kv_kernel<KvElement::kF32>, grid, kThreads, 0, stream, a); break;
    case KvElement::kBF16: launch_dependent(store_kv_kernel<KvElement::kBF16>, grid, kThreads, 0, stream, a); break;
    case KvElement::kE4M3: launch_dependent(store_kv_kernel<KvElement::kE4M3>, grid, kThreads, 0, stream, a); break;
    case KvElement::kE5M2: launch_dependent(store_kv_kernel<KvElement::kE5M2>, grid, kThreads, 0, stream, a); break;
    default: fail(op, "unknown kv element type " + std::to_string(int(layer.element)));  // see launch_rows_any
  }
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

size_t paged_attention_workspace_bytes(const DeviceAttentionBatch& batch, const backend::AttentionParams& p) {
  if (batch.num_rows <= 0 || batch.num_seqs <= 0 || batch.max_new_tokens <= 0 || p.num_heads <= 0 ||
      p.head_dim <= 0)
    return 0;
  return make_plan(batch, p).workspace;
}

void paged_attention(const __nv_bfloat16* q, __nv_bfloat16* out, const DeviceAttentionBatch& batch,
                     const backend::AttentionParams& p, int block_size, const DeviceKvLayer& layer, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream, unsigned* merge_counters,
                     DecodeKernelChoice decode_kernel) {
  check_attention(q, out, batch, p, block_size, layer, workspace, workspace_bytes);
  if (batch.num_rows == 0) return;
  const Plan plan = make_plan(batch, p);
  const bool fp8 = is_fp8(layer.element);
  const int64_t window = p.sliding_window ? *p.sliding_window : 0;
  const float score_scale = fp8 ? p.scale * layer.k_scale : p.scale;
  const float v_scale = fp8 ? layer.v_scale : 1.0f;

  RowArgs ra{};
  ra.q = q;
  ra.out = out;
  ra.row_seq = batch.row_seq;
  ra.seq_first_row = batch.seq_first_row;
  ra.seq_num_tokens = batch.seq_num_tokens;
  ra.seq_start_position = batch.seq_start_position;
  ra.block_tables = batch.block_tables;
  ra.max_blocks_per_seq = batch.max_blocks_per_seq;
  ra.k = layer.k;
  ra.v = layer.v;
  ra.num_heads = p.num_heads;
  ra.num_kv_heads = p.num_kv_heads;
  ra.group = plan.group;
  ra.head_dim = int(p.head_dim);
  ra.block_size = block_size;
  ra.window = window;
  ra.score_scale = score_scale;
  ra.v_scale = v_scale;
  ra.parts = plan.parts;
  ra.tcap = plan.tcap;
  ra.seq_base = 0;
  if (plan.workspace > 0) {
    auto* base = static_cast<unsigned char*>(workspace);
    const auto up16 = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
    ra.part_o = reinterpret_cast<float*>(base);
    ra.part_m = reinterpret_cast<float*>(base + up16(plan.part_o_floats * 4));
    ra.part_l = reinterpret_cast<float*>(base + up16(plan.part_o_floats * 4) + up16(plan.part_ml_floats * 4));
  }

  // Decode rows (sequences with ≤ kDecodeMaxNewTokens new tokens) take the tensor-core decode
  // kernel where it has a form for the head size and cache (H200, Llama-3.1-8B, 1k context:
  // docs/benchmarks.md), else the split SIMT kernel over 64-position partitions.
  const bool mma = paged_attention_prefill_uses_mma(p.head_dim, layer.element);
  const bool decode_on_mma = paged_attention_decode_uses_mma(batch, p, layer.element);

  // 1. Decode rows on the SIMT kernel, split over partitions.
  if (!decode_on_mma) {
    ra.split = true;
    ra.partition = kDecodePartition;
    static const bool prefetch = env_switch_on("FP8LM_CUDA_KV_PREFETCH");  // A/B switch, default on
    for (int64_t first = 0; first < batch.num_seqs; first += plan.group_seqs) {
      ra.seq_base = int(first);
      const int64_t slots = std::min<int64_t>(plan.group_seqs, batch.num_seqs - first) * plan.tcap;
      // The kernel merges the partitions itself where there are counters for every
      // (slot, KV head) of the launch; else the reduce kernel does.
      ra.merge_counters = merge_counters != nullptr && slots * p.num_kv_heads <= kAttentionMergeCounters
                              ? merge_counters
                              : nullptr;
      // The L2 prefetch before the wait pays only for CTAs that start beside the kernel before:
      // a grid of one wave (H200, Llama-3.1-8B FP8 decode: +0.85 % at batch 1, 256 CTAs;
      // −1.2 % at batch 8, 2048 CTAs, where most CTAs start after that kernel has finished).
      ra.prefetch = prefetch && slots * plan.parts * p.num_kv_heads <= 2 * int64_t(sm_count());
      launch_rows_any(layer.element, ra, unsigned(slots * plan.parts), stream);
      if (plan.parts > 1 && ra.merge_counters == nullptr) {
        launch_dependent(reduce_kernel, dim3(unsigned(slots), unsigned(p.num_heads)), 32, 0, stream, ra);
        FP8LM_CUDA_CHECK(cudaGetLastError());
      }
    }
    ra.seq_base = 0;
    ra.merge_counters = nullptr;
    if (!plan.prefill) return;
  }

  FlashArgs fa{};
  fa.q = q;
  fa.out = out;
  fa.seq_first_row = batch.seq_first_row;
  fa.seq_num_tokens = batch.seq_num_tokens;
  fa.seq_start_position = batch.seq_start_position;
  fa.block_tables = batch.block_tables;
  fa.max_blocks_per_seq = batch.max_blocks_per_seq;
  fa.k = layer.k;
  fa.v = layer.v;
  fa.num_heads = p.num_heads;
  fa.num_kv_heads = p.num_kv_heads;
  fa.group = plan.group;
  fa.block_size = block_size;
  fa.window = window;
  fa.score_scale = score_scale;
  fa.v_scale = v_scale;
  fa.chunks = 1;

  // 2. Decode rows on the tensor cores: one CTA per (sequence, 16 rows, KV head), and where
  // those are fewer than kDecodeCtasPerSm per SM, the context split into as many chunks as make
  // them up (a chunk ≥ one 64-key tile), merged by the kernel's last chunk or the reduce kernel.
  // Sized by the decode rows' own bound on new tokens where the host gave one (a step mixing
  // prefills and one-token decodes: one row tile, or the pair kernel); no launch where the step
  // has no decode rows.
  const int dec_tcap = decode_tcap(batch, plan.tcap);
  if (decode_on_mma && dec_tcap > 0) {
    fa.tiles = int(cdiv(int64_t(dec_tcap) * plan.group, kKeySplitRows));
    fa.decode_max_new_tokens = plan.prefill ? kDecodeMaxNewTokens : 0;
    fa.tcap = dec_tcap;
    const int64_t max_tiles = cdiv(batch.max_context, kBN);
    int64_t chunk_tiles = max_tiles;
    const int64_t ctas = int64_t(batch.num_seqs) * fa.tiles * p.num_kv_heads;
    const int64_t want = kDecodeCtasPerSm * sm_count();
    // The partials use the workspace sized for the SIMT kernel's partitions (as many as tiles),
    // whole batches only.
    if (ctas < want && plan.workspace > 0 && plan.group_seqs == batch.num_seqs)
      chunk_tiles = cdiv(max_tiles, std::min(cdiv(want, ctas), max_tiles));
    fa.chunk_tiles = int(chunk_tiles);
    fa.chunks = int(cdiv(max_tiles, chunk_tiles));
    fa.part_o = ra.part_o;
    fa.part_m = ra.part_m;
    fa.part_l = ra.part_l;
    // The kernel merges the chunks itself where there are counters for every (sequence, row
    // tile, KV head); else the reduce kernel does.
    fa.merge_counters = merge_counters != nullptr && ctas <= kAttentionMergeCounters ? merge_counters : nullptr;
    // Decode rows on an FP8 cache whose sequences' rows fit 8 (one token × a group of ≤ 8) take
    // the pair kernel (one warp per (sequence, KV head), transposed tiles) where pairs are many
    // (kDecodePairsPerSm), else the key-split CTAs.
    if (paged_attention_decode_uses_pairs(batch, p, layer.element, decode_kernel)) {
      fa.num_seqs = batch.num_seqs;
      launch_pair_decode(int(p.head_dim), layer.element, fa, stream);
    } else {
      launch_warp_decode(int(p.head_dim), layer.element, fa, unsigned(int64_t(batch.num_seqs) * fa.tiles), stream);
      if (fa.chunks > 1 && fa.merge_counters == nullptr) {
        ra.parts = fa.chunks;
        ra.partition = fa.chunk_tiles * kBN;
        ra.tcap = dec_tcap;  // the partials' slots: sequence · dec_tcap + token
        launch_dependent(reduce_kernel, dim3(unsigned(int64_t(batch.num_seqs) * dec_tcap), unsigned(p.num_heads)), 32,
                         0, stream, ra);
        FP8LM_CUDA_CHECK(cudaGetLastError());
        ra.tcap = plan.tcap;
      }
    }
    if (!plan.prefill) return;
    fa.chunks = 1;
  }

  // 3. Rows of sequences with more new tokens.
  if (mma) {
    fa.tiles = int(cdiv(int64_t(batch.max_new_tokens) * plan.group, kBM));
    fa.decode_max_new_tokens = kDecodeMaxNewTokens;
    const unsigned blocks = unsigned(int64_t(batch.num_seqs) * fa.tiles);
    if (p.head_dim == 64) launch_flash_e<64>(layer.element, fa, blocks, stream);
    else launch_flash_e<128>(layer.element, fa, blocks, stream);
  } else {
    ra.split = false;
    launch_rows_any(layer.element, ra, unsigned(batch.num_rows), stream);
  }
}

}  // namespace fp8lm::cuda
