// The persistent decode kernel; see decode_program.h for what it runs and its numerics.
//
// Shape of the work:
//   * A GEMV tile is 16 weight rows × the whole K (gate/up: 8 gate rows and their 8 up rows, so
//     the tile finishes SiLU·mul itself), streamed by the loader warp through the ring of
//     shared-memory slots (weight_ring.cuh). The 7 consumer warps split K by pages;
//     lane (g, t) reads 16 bytes of rows g and g + 8 per 64-byte step, the tile's rows as the MMA's
//     16-row operand and the ≤ 8 staged activation rows as its 8 columns (fp8_gemv.h's
//     arrangement). Warp partials are summed in shared memory in warp order.
//   * A tile stages its input first: the rows of h normed (input / post-attention / final norm)
//     or the rows of attn / act as they are, then quantized per row (W8A8) into E4M3 codes, or
//     kept in BF16. One warp a row, three passes over it from L2 (sum of squares, amax, store).
//   * An attention instruction takes one (row, KV head, split of the context): it ropes its
//     query heads (and q/k-norms them), the split holding the new position stores the new K/V
//     first, then a group of head_dim / 8 lanes per position keeps a running softmax per head;
//     the CTA's groups merge in shared memory, the split's state goes to `partials`, and the last
//     split of a (row, KV head) to finish (a counter) merges the splits in split order.
//   * Dependencies: an instruction waits until its input phase's counter reaches that phase's
//     instruction count (thread 0 polls with an acquire load, the consumers' barrier passes it
//     on); when done, it counts itself into its own phase's counter (a fence, the consumers'
//     barrier, thread 0's atomic add; a CTA's run of one phase adds once).
//     Activations written inside the launch are read through L2 (ld.global.cg), never L1.
//   * No L2 prefetch ahead of the ring: with 225 KB of pages in flight an SM, a 256 KB prefetch
//     window only competed with the ring for L2 (lines evicted before the ring read them, DRAM
//     moving twice the weights): 8.15 ms a token with it, 6.66 without (issue 41, session 25).
//   * The last CTA to finish zeroes every counter for the next launch.
#include "backend/cuda/persistent/decode_program.h"
#include "backend/cuda/persistent/weight_ring.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "backend/cuda/attention/kv_store_device.cuh"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/norm_rope_device.cuh"
#include "backend/cuda/quant/quantize_device.cuh"
#include "backend/paged_kv_types.h"
#include "common/error.h"
#include "numerics/silu.h"

namespace fp8lm::cuda::persistent {
namespace {

constexpr int kWarps = kThreads / 32;  // the consumer warps; warp kWarps is the loader
constexpr int kRedBuffers = 4;  // tiles whose warp partials a CTA holds at once (gemv's TileSync)
constexpr int kRedBytes = kRedBuffers * kWarps * kTileRows * kMaxRows * 4;  // the tiles' warp partials

// ---- the consumer warps' barrier ----------------------------------------------------------------

// The consumer warps synchronize among themselves (named barrier 1): the loader warp runs ahead
// on its own and never joins them.
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

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
  consumer_sync();
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
__device__ __noinline__ void stage_normed(const Params& p, const DeviceLinear& l, const float* norm, unsigned char* raw,
                             unsigned char* xs, StageShared& st) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int m = p.rows, nv = l.k / 8, stride = staged_stride(l);
  for (int i = threadIdx.x; i < m * nv; i += kThreads) cp_async16(raw + i * 16, p.h + int64_t(i) * 8, 16);
  asm volatile("cp.async.wait_all;" ::: "memory");
  if (threadIdx.x < kMaxRows) st.amax[threadIdx.x] = 0u;
  consumer_sync();
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
  consumer_sync();
  if (threadIdx.x < m) {
    double t = 0.0;
    for (int w = 0; w < kWarps; ++w) t = __dadd_rn(t, st.ss[threadIdx.x][w]);
    st.inv[threadIdx.x] = rms_inv(t, l.k, p.eps);
  }
  consumer_sync();
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
      consumer_sync();
    }
    if (threadIdx.x < m)
      st.row_scale[threadIdx.x] = l.static_x_scale != nullptr ? __ldg(l.static_x_scale)
                                                              : scale_from_amax(__uint_as_float(st.amax[threadIdx.x]), l.rule);
    consumer_sync();
  }
  for (int i = threadIdx.x; i < m * nv; i += kThreads) {
    const int r = i / nv, v = i % nv;
    float x[8];
    normed(r, v, x);
    if (l.fp8) *reinterpret_cast<uint2*>(xs + r * stride + v * 8) = quantize8(x, st.row_scale[r], Fp8Format::kE4M3);
    else store8<true>(reinterpret_cast<uint16_t*>(xs + r * stride) + v * 8, 8, x);
  }
  consumer_sync();
}

// Rows of `src` ([rows, k], attn or act) as the input of `l`, as they are: BF16 copied (cp.async),
// or E4M3 codes under the row scales from `amax` (the producers' row amaxes) or the static scale —
// quantize_fp8's codes, from one pass with every thread's loads in flight.
__device__ __noinline__ void stage_plain(const Params& p, const DeviceLinear& l, const __nv_bfloat16* src, const unsigned* amax,
                            unsigned char* xs, StageShared& st) {
  const int m = p.rows, nv = l.k / 8, stride = staged_stride(l);
  if (!l.fp8) {
    for (int i = threadIdx.x; i < m * nv; i += kThreads)
      cp_async16(xs + (i / nv) * stride + (i % nv) * 16, src + int64_t(i) * 8, 16);
    asm volatile("cp.async.wait_all;" ::: "memory");
    consumer_sync();
    return;
  }
  if (threadIdx.x < m)
    st.row_scale[threadIdx.x] = l.static_x_scale != nullptr
                                    ? __ldg(l.static_x_scale)
                                    : scale_from_amax(__uint_as_float(__ldcg(amax + threadIdx.x)), l.rule);
  consumer_sync();
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
  consumer_sync();
}


// A GEMV instruction's 16 weight rows.
struct TileRows {
  const DeviceLinear* l = nullptr;
  int ra = 0, rb = 0;
};
__device__ __forceinline__ TileRows tile_rows(const Params& p, const Instruction& ins) {
  const int r = ins.a * kTileRows;
  if (Op(ins.op) == Op::kLmHead) return {&p.lm_head, r, r + 8};
  const DeviceLayer& L = p.layers[ins.layer];
  switch (Op(ins.op)) {
    case Op::kQkv: return {&L.qkv, r, r + 8};
    case Op::kO: return {&L.o, r, r + 8};
    case Op::kGateUp: return {&L.gate_up, ins.a * 8, p.shape.intermediate + ins.a * 8};
    case Op::kDown: return {&L.down, r, r + 8};
    default: return {};
  }
}
__device__ __forceinline__ int row_steps(const DeviceLinear& l) { return int(row_bytes(l) / 64); }


// The loader warp: every GEMV tile of the CTA's queue, page by page, into the ring.
template <bool kProfile>
__device__ __noinline__ void loader(const Params& p, int q0, int q1, const Ring ring) {
  const int lane = threadIdx.x & 31;
  const uint64_t start = kProfile ? global_ns() : 0;
  uint64_t waited = 0;
  uint32_t seq = 0;  // pages issued so far
  for (int qi = q0; qi < q1; ++qi) {
    const Instruction ins = p.instructions[p.queue[qi]];
    if (Op(ins.op) == Op::kAttention) continue;
    const TileRows t = tile_rows(p, ins);
    const int steps = row_steps(*t.l), pages = tile_pages(steps), ps = t.l->page_steps;
    if (lane == 0) asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(t.l->map)) : "memory");
    for (int j = 0; j < pages; ++j, ++seq) waited += issue_page<kProfile>(ring, seq, t.l->map, t.ra, t.rb, j * ps, ps, steps);
  }
  if constexpr (kProfile) {
    // Straight to memory: the consumers may be copying their own timers out by now.
    unsigned long long* out = p.profile + (blockIdx.x * kProfileKinds + kProfileRing) * kProfileParts;
    if (lane == 0) out[1] = waited, out[2] = global_ns() - start, out[3] = seq;
  }
}

// ---- the GEMV tile -----------------------------------------------------------------------------

enum class Epilogue { kStore, kResidual, kSiluMul };

// A tile's warp partials go to one of kRedBuffers buffers (the CTA's tile number modulo), and the
// last warp to add its partial reduces them and writes the tile: no barrier joins the consumer
// warps at a tile, so a warp done with its pages goes on to its pages of the next tiles while the
// tile's last page is still landing (v6's per-tile barrier and 128-thread epilogue held all seven
// warps to the slowest page: 26 % of the step in barrier stalls, Nsight Compute in v7/).
// `epoch[b]` is the CTA tile number whose partials buffer b takes next: a warp that runs more than
// kRedBuffers tiles ahead of a tile's reduction waits for it (the ring's few slots make that rare).
struct TileSync {
  unsigned arrived[kRedBuffers];
  unsigned epoch[kRedBuffers];
};

// One GEMV tile (the input already staged), the CTA's tile number `tile`: this warp's pages from
// the ring (`seq`: the tile's first page; returns the page after the tile), its partial into the
// tile's buffer, and — by the last warp to arrive — the partials summed in warp order, scaled,
// biased, rounded to BF16 and written by `epilogue`:
//   kStore: y[row, n0 + r] = v_r; kResidual: y[row, n0 + r] = bf16(y + v_r) (y = h), r < 16;
//   kSiluMul: y[row, n0 + r] = silu_mul(v_r, v_{r+8}), r < 8 (gate rows, then their up rows).
// kProfile: thread 0 adds its waits for pages to `*page_wait`.
template <bool kProfile>
__device__ __noinline__ uint32_t gemv(const Params& p, const TileRows tr, const Ring ring, const uint32_t seq,
                                      const uint32_t tile, const unsigned char* xs, const float* row_scale, float* red,
                                      TileSync* ts, Epilogue epilogue, __nv_bfloat16* y, int64_t ld_y, int n0,
                                      unsigned long long* page_wait, unsigned* amax_out = nullptr) {
  const DeviceLinear& l = *tr.l;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int steps = row_steps(l), pages = tile_pages(steps), ps = l.page_steps;
  const bool fp8 = l.fp8;
  const bool has_x = g < p.rows;
  const unsigned char* xr = xs + g * staged_stride(l) + 16 * t;
  float acc[4] = {};
  // The ring's page seq + j is warp (seq + j) mod 7's.
  for (int j = (warp + kWarps - int(seq % unsigned(kWarps))) % kWarps; j < pages; j += kWarps) {
    const uint32_t sq = seq + uint32_t(j);
    const uint64_t t0 = kProfile && threadIdx.x == 0 ? global_ns() : 0;
    const unsigned char* page = wait_page(ring, sq);
    if (kProfile && threadIdx.x == 0) *page_wait += global_ns() - t0;
    const int s0 = min(j * ps, steps), s1 = min(s0 + ps, steps);
    if (fp8) page_products<true>(page, ps * 64, s0, s1, xr, has_x, acc);
    else page_products<false>(page, ps * 64, s0, s1, xr, has_x, acc);
    release_page(ring, sq);
  }
  const uint32_t next = seq + uint32_t(pages);
  // The partial into buffer b as red[b][warp][row][tok].
  const int b = int(tile % unsigned(kRedBuffers));
  volatile unsigned* epoch = ts->epoch;
  while (epoch[b] != tile) __nanosleep(32);
  float* r = red + (b * kWarps + warp) * kTileRows * kMaxRows;
  r[g * kMaxRows + 2 * t] = acc[0];
  r[g * kMaxRows + 2 * t + 1] = acc[1];
  r[(g + 8) * kMaxRows + 2 * t] = acc[2];
  r[(g + 8) * kMaxRows + 2 * t + 1] = acc[3];
  __syncwarp();
  unsigned last = 0;
  if (lane == 0) {
    __threadfence_block();
    last = atomicAdd(ts->arrived + b, 1u) == unsigned(kWarps - 1);
  }
  if (!__shfl_sync(0xFFFFFFFFu, last, 0)) return next;
  __threadfence_block();
  __syncwarp();

  // The last warp: 16 rows × 8 tokens, lane + 32 i = (row in tile) · 8 + token.
  const float* rb = red + b * kWarps * kTileRows * kMaxRows;
  const bool silu = epilogue == Epilogue::kSiluMul;
  const int outs = silu ? 2 : 4;  // silu: tile rows 0-7 only, each from rows r and r + 8
  float a = 0.0f;  // |the values written| of this lane's token, for the row amax (kSiluMul)
  const int tok = lane % kMaxRows;
  for (int i = 0; i < outs; ++i) {
    const int rr = lane / kMaxRows + 4 * i;
    if (tok >= p.rows) break;
    float v[2] = {0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && !silu) break;
      const int tr_row = rr + 8 * k;  // the tile row
      const int row = tr_row < 8 ? tr.ra + tr_row : tr.rb + tr_row - 8;
      float s = 0.0f;
      for (int w = 0; w < kWarps; ++w) s = __fadd_rn(s, rb[(w * kTileRows + tr_row) * kMaxRows + tok]);
      if (fp8) s = __fmul_rn(__fmul_rn(__fmul_rn(s, 256.0f), row_scale[tok]), __ldg(l.w_scale + (l.w_scale_per_row ? row : 0)));
      if (l.bias != nullptr) s = __fadd_rn(s, __bfloat162float(l.bias[row]));
      v[k] = round_bf16(s);
    }
    __nv_bfloat16* out = y + int64_t(tok) * ld_y + n0 + rr;
    if (epilogue == Epilogue::kStore) {
      *out = __float2bfloat16_rn(v[0]);
    } else if (epilogue == Epilogue::kResidual) {
      *out = __float2bfloat16_rn(round_bf16(__fadd_rn(__bfloat162float(__ldcg(out)), v[0])));
    } else {
      const float act = round_bf16(silu_mul_f32(v[0], v[1]));
      *out = __float2bfloat16_rn(act);
      a = fmaxf(a, fabsf(act));
    }
  }
  if (amax_out != nullptr) {
    // Lanes of one token: tok, tok + 8, tok + 16, tok + 24.
    a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, 8));
    a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, 16));
    if (lane < kMaxRows && lane < p.rows && a > 0.0f) atomicMax(amax_out + lane, __float_as_uint(a));
  }
  __syncwarp();
  if (lane == 0) {
    ts->arrived[b] = 0;
    __threadfence_block();
    epoch[b] = tile + unsigned(kRedBuffers);
  }
  return next;
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

// The block tables are the host's for the whole launch: read through the non-coherent cache (L1),
// so that a split's positions after the first of a block find their block at L1 latency.
__device__ __forceinline__ int64_t cache_index(const Params& p, const int32_t* table, int kv_head, int pos, int e0) {
  const int64_t block = __ldg(table + pos / p.block_size);
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
__device__ __noinline__ void attention(const Params& p, const DeviceLayer& L, int layer, int row, int kv_head, int split,
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
  float* state = qs + kMaxGroup * kHeadDim;                   // [warps][state_stride], then [splits][state_stride]
  const int state_stride = partial_stride(G, kHeadDim);       // [G][head_dim + 2], padded to 16 bytes

  // The query heads, roped (warp w: heads w, w + 7), and the new K/V into the cache by the split
  // that holds the new position (its last warp, after its heads).
  for (int h = warp; h < G; h += kWarps) {
    float x[8];
    rope_head(p, qkv_row + (kv_head * G + h) * kHeadDim, L.q_norm, sr.pos, lane, kGroupLanes, x);
    if (lane < kGroupLanes)
#pragma unroll
      for (int j = 0; j < 8; ++j) qs[h * kHeadDim + lane * 8 + j] = x[j];
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
  consumer_sync();

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
  // The warp's kSubs states merged by shuffles (sub s with s ^ 1, then s ^ 2, …, the lower sub's
  // state first), so that the CTA merges one state a warp: v8 merged 7 · kSubs states in shared
  // memory with an expf per state and output element (~460 a thread at head_dim 128).
#pragma unroll
  for (int off = kGroupLanes; off < 32; off <<= 1) {
    const bool lower = (lane & off) == 0;
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= G) break;
      const float mo = __shfl_xor_sync(0xFFFFFFFFu, m[h], off), lo = __shfl_xor_sync(0xFFFFFFFFu, l[h], off);
      float oo[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) oo[j] = __shfl_xor_sync(0xFFFFFFFFu, o[h][j], off);
      const float mn = fmaxf(m[h], mo);
      const float ca = mn == -INFINITY ? 0.0f : expf(m[h] - mn), cb = mn == -INFINITY ? 0.0f : expf(mo - mn);
      // (lower: a = mine, b = the other's; upper: a = the other's, b = mine — one order for both.)
      const float wa = lower ? ca : cb, wb = lower ? cb : ca;
      const float la = lower ? l[h] : lo, lb = lower ? lo : l[h];
      l[h] = la * wa + lb * wb;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float a = lower ? o[h][j] : oo[j], b = lower ? oo[j] : o[h][j];
        o[h][j] = a * wa + b * wb;
      }
      m[h] = mn;
    }
  }
  // The warps' states into shared memory (sub 0's lanes), merged in warp order by thread (h, e)
  // under weights computed once a (warp, head) into `wts` (the query heads' room, free by now).
  float* mine = state + warp * state_stride;
  if (sub == 0) {
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
      if (h >= G) break;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine[h * (kHeadDim + 2) + gl * 8 + j] = o[h][j];
      if (gl == 0) mine[h * (kHeadDim + 2) + kHeadDim] = m[h], mine[h * (kHeadDim + 2) + kHeadDim + 1] = l[h];
    }
  }
  consumer_sync();
  float* wts = qs;  // [G][kWarps + 1]: the warps' weights, then the merged maximum
  if (threadIdx.x < G) {
    const int h = threadIdx.x;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, state[w * state_stride + h * (kHeadDim + 2) + kHeadDim]);
    for (int w = 0; w < kWarps; ++w) {
      const float mw = state[w * state_stride + h * (kHeadDim + 2) + kHeadDim];
      wts[h * (kWarps + 1) + w] = mw == -INFINITY ? 0.0f : expf(mw - M);
    }
    wts[h * (kWarps + 1) + kWarps] = M;
  }
  consumer_sync();
  float* out = p.partials + ((int64_t(row) * p.shape.kv_heads + kv_head) * p.splits + split) * state_stride;
  for (int idx = threadIdx.x; idx < G * (kHeadDim + 2); idx += kThreads) {
    const int h = idx / (kHeadDim + 2), e = idx % (kHeadDim + 2);
    const float* w = wts + h * (kWarps + 1);
    float acc = 0.0f;
    if (e != kHeadDim)
#pragma unroll
      for (int s = 0; s < kWarps; ++s) acc += w[s] * state[s * state_stride + h * (kHeadDim + 2) + e];
    out[idx] = e == kHeadDim ? w[kWarps] : acc;
  }
  // The last split of (row, KV head) to finish merges the splits in split order.
  unsigned* merge = merge_counter(p, row, kv_head);
  __shared__ bool s_last;
  consumer_sync();
  if (threadIdx.x == 0) {
    __threadfence();
    s_last = atomicAdd(merge, 1u) == unsigned(p.splits - 1);
  }
  consumer_sync();
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
  // The splits' weights once a (split, head) into `wts` ([G][splits + 1], the last the maximum).
  consumer_sync();
  if (threadIdx.x < G) {
    const int h = threadIdx.x;
    float M = -INFINITY;
    for (int s = 0; s < p.splits; ++s) M = fmaxf(M, state[s * state_stride + h * (kHeadDim + 2) + kHeadDim]);
    for (int s = 0; s < p.splits; ++s) {
      const float ms = state[s * state_stride + h * (kHeadDim + 2) + kHeadDim];
      wts[h * (p.splits + 1) + s] = ms == -INFINITY ? 0.0f : expf(ms - M);
    }
  }
  consumer_sync();
  float a = 0.0f;
  for (int idx = threadIdx.x; idx < G * kHeadDim; idx += kThreads) {
    const int h = idx / kHeadDim, e = idx % kHeadDim;
    const float* w = wts + h * (p.splits + 1);
    float num = 0.0f, den = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float* st = state + s * state_stride + h * (kHeadDim + 2);
      num += w[s] * st[e];
      den += w[s] * st[kHeadDim + 1];
    }
    const __nv_bfloat16 v = __float2bfloat16_rn(num / den * (fp8 ? L.v_scale : 1.0f));
    p.attn[int64_t(row) * q_width + (kv_head * G + h) * kHeadDim + e] = v;
    a = fmaxf(a, fabsf(__bfloat162float(v)));
  }
  warp_amax_to(attn_amax(p, layer) + row, a);  // o_proj's activation scale of the row
  if (threadIdx.x == 0) *merge = 0;  // for the next layer and the next launch
}

// ---- the kernel ---------------------------------------------------------------------------------

// kProfile: thread 0 times each instruction's parts into p.profile (decode_program.h, Profile).
template <int kHeadDim, bool kProfile>
__global__ void __launch_bounds__(kBlockThreads, 1) decode_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ StageShared st;
  __shared__ unsigned long long prof[kProfileKinds][kProfileParts];
  __shared__ __align__(8) uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ uint32_t page[kMaxSlots];
  const int q0 = p.queue_start[blockIdx.x], q1 = p.queue_start[blockIdx.x + 1];
  const Ring ring{smem + p.slots_offset, full, empty, page, p.slots};
  __shared__ TileSync ts;
  if (threadIdx.x < p.slots) {
    mbar_init(full + threadIdx.x, 1), mbar_init(empty + threadIdx.x, 1);
    page[threadIdx.x] = ~0u;  // no page yet
  }
  if (threadIdx.x < kRedBuffers) ts.arrived[threadIdx.x] = 0, ts.epoch[threadIdx.x] = threadIdx.x;
  if constexpr (kProfile)
    if (threadIdx.x < kProfileKinds * kProfileParts) (&prof[0][0])[threadIdx.x] = 0;
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();  // the last barrier the loader warp joins
  if (threadIdx.x >= kThreads) {
    loader<kProfile>(p, q0, q1, ring);
    return;
  }
  uint64_t last = 0;
  auto mark = [&](int kind, int part) {
    if constexpr (kProfile) {
      if (threadIdx.x == 0) {
        const uint64_t t = global_ns();
        prof[kind][part] += t - last;
        last = t;
      }
    }
  };
  if constexpr (kProfile)
    if (threadIdx.x == 0) last = global_ns();
  float* red = reinterpret_cast<float*>(smem);
  unsigned char* raw = smem + kRedBytes;                                 // rows of h, normed inputs
  unsigned char* xs = raw + p.rows * p.shape.hidden * 2;                 // the staged GEMV input
  unsigned char* scratch = raw;                                          // attention's state
  const int layers = p.shape.layers;
  const int q_width = p.shape.q_heads * kHeadDim;
  const int64_t ld_qkv = q_width + 2 * p.shape.kv_heads * kHeadDim;
  uint32_t seq = 0;   // the ring's pages consumed so far
  uint32_t tile = 0;  // the CTA's GEMV tiles so far

  // Counting done instructions: a CTA's run of one phase adds its count once, when the phase
  // changes or before the CTA waits (never hold a count back while waiting: that could deadlock).
  unsigned* pending = nullptr;
  unsigned pending_n = 0;
  auto flush = [&] {
    if (pending_n == 0) return;
    __threadfence();
    consumer_sync();
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

  for (int qi = q0; qi < q1; ++qi) {
    const Instruction ins = p.instructions[p.queue[qi]];
    const Op op = Op(ins.op);
    const int kind = int(op);
    const int layer = ins.layer;
    const int key = layer * 8 + int(op);
    const int n0 = ins.a * kTileRows;
    if (op == Op::kLmHead) {
      wait(phase_counter(p, layers - 1, 4), unsigned(p.phase_count[4]));
      mark(kind, 0);
      if (staged != key) {
          consumer_sync();  // every warp done with the shared memory it overwrites
          stage_normed(p, p.lm_head, p.final_norm, raw, xs, st);
        }
      mark(kind, 1);
      staged = key;
      seq = gemv<kProfile>(p, tile_rows(p, ins), ring, seq, tile++, xs, st.row_scale, red, &ts, Epilogue::kStore, p.logits, p.shape.vocab, n0,
                    &prof[kProfileRing][0]);
      mark(kind, 2);
      if (kProfile && threadIdx.x == 0) ++prof[kind][3];
      continue;  // nothing waits for lm_head inside the launch
    }
    const DeviceLayer& L = p.layers[layer];
    switch (op) {
      case Op::kQkv:
        if (layer > 0) wait(phase_counter(p, layer - 1, 4), unsigned(p.phase_count[4]));
        mark(kind, 0);
        if (staged != key) {
          consumer_sync();  // every warp done with the shared memory it overwrites
          stage_normed(p, L.qkv, L.input_norm, raw, xs, st);
        }
        mark(kind, 1);
        seq = gemv<kProfile>(p, tile_rows(p, ins), ring, seq, tile++, xs, st.row_scale, red, &ts, Epilogue::kStore, p.qkv, ld_qkv, n0,
                      &prof[kProfileRing][0]);
        count(phase_counter(p, layer, 0));
        break;
      case Op::kAttention:
        wait(phase_counter(p, layer, 0), unsigned(p.phase_count[0]));
        mark(kind, 0);
        consumer_sync();  // every warp done with the shared memory attention overwrites
        mark(kind, 1);
        attention<kHeadDim>(p, L, layer, ins.a, ins.b, ins.c, scratch);
        count(phase_counter(p, layer, 1));
        break;
      case Op::kO:
        wait(phase_counter(p, layer, 1), unsigned(p.phase_count[1]));
        mark(kind, 0);
        if (staged != key) {
          consumer_sync();  // every warp done with the shared memory it overwrites
          stage_plain(p, L.o, p.attn, attn_amax(p, layer), xs, st);
        }
        mark(kind, 1);
        seq = gemv<kProfile>(p, tile_rows(p, ins), ring, seq, tile++, xs, st.row_scale, red, &ts, Epilogue::kResidual, p.h, p.shape.hidden, n0,
                      &prof[kProfileRing][0]);
        count(phase_counter(p, layer, 2));
        break;
      case Op::kGateUp:
        wait(phase_counter(p, layer, 2), unsigned(p.phase_count[2]));
        mark(kind, 0);
        if (staged != key) {
          consumer_sync();  // every warp done with the shared memory it overwrites
          stage_normed(p, L.gate_up, L.post_norm, raw, xs, st);
        }
        mark(kind, 1);
        seq = gemv<kProfile>(p, tile_rows(p, ins), ring, seq, tile++, xs, st.row_scale, red, &ts, Epilogue::kSiluMul, p.act, p.shape.intermediate,
             ins.a * 8, &prof[kProfileRing][0], act_amax(p, layer));
        count(phase_counter(p, layer, 3));
        break;
      case Op::kDown:
        wait(phase_counter(p, layer, 3), unsigned(p.phase_count[3]));
        mark(kind, 0);
        if (staged != key) {
          consumer_sync();  // every warp done with the shared memory it overwrites
          stage_plain(p, L.down, p.act, act_amax(p, layer), xs, st);
        }
        mark(kind, 1);
        seq = gemv<kProfile>(p, tile_rows(p, ins), ring, seq, tile++, xs, st.row_scale, red, &ts, Epilogue::kResidual, p.h, p.shape.hidden, n0,
                      &prof[kProfileRing][0]);
        count(phase_counter(p, layer, 4));
        break;
      default: break;
    }
    // Attention's state overwrites the staged input. No barrier here: the next instruction that
    // overwrites shared memory (a staging, attention) syncs first.
    staged = op == Op::kAttention ? -1 : key;
    mark(kind, 2);
    if (kProfile && threadIdx.x == 0) ++prof[kind][3];
  }
  flush();
  if constexpr (kProfile) {
    mark(kProfileKinds - 1, 0);
    if (threadIdx.x == 0) ++prof[kProfileKinds - 1][3];
    consumer_sync();
    // The ring's loader parts are the loader's own (it writes them).
    if (threadIdx.x < kProfileKinds * kProfileParts &&
        (threadIdx.x / kProfileParts != kProfileRing || threadIdx.x % kProfileParts == 0))
      p.profile[blockIdx.x * kProfileKinds * kProfileParts + threadIdx.x] = (&prof[0][0])[threadIdx.x];
  }
  // The last CTA out zeroes the phase counters and the row amaxes (the merge counters are zeroed
  // by their mergers).
  __shared__ bool s_last;
  unsigned* done = act_amax(p, layers);  // counter_count − 1
  __threadfence();
  consumer_sync();
  if (threadIdx.x == 0) s_last = atomicAdd(done, 1u) == gridDim.x - 1;
  consumer_sync();
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
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSharedLimit)));
    configured = true;
  }
  decode_kernel<kHeadDim, kProfile><<<ctas, kBlockThreads, smem, stream>>>(p);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t staging_bytes(const ModelShape& shape, int rows, int64_t row_bytes) {
  const size_t staged = size_t(rows) * size_t(shape.hidden) * 2 + size_t(rows) * size_t(row_bytes + 16);
  const int hd = shape.head_dim, group = shape.q_heads / std::max(shape.kv_heads, 1);
  // Attention: the roped query heads, then the CTA's states (one a warp: a warp merges its subs by
  // shuffles first), or the splits' states the last split merges.
  const size_t states = size_t(std::max(kWarps, kMaxSplits));
  const size_t attention = (size_t(kMaxGroup * hd) + states * size_t(partial_stride(group, hd))) * sizeof(float);
  return (size_t(kRedBytes) + std::max(staged, attention) + 127) / 128 * 128;
}

size_t ring_slot_bytes() { return size_t(kSlotBytes); }

int ctas_per_sm(size_t smem) {
  int n = 0;
  // Both instantiations have the same launch bounds and shared memory; ask for the larger.
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<128, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kSharedLimit)));
  FP8LM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_kernel<128, false>, kBlockThreads, smem));
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
