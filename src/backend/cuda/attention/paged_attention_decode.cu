// The tensor-core decode kernel (attention_mma.cuh's launch_warp_decode): rows of sequences with
// few new tokens, one CTA per (sequence, 16 packed (token, query head) rows, KV head, chunk of
// the context), each of its 4 warps a quarter of every 64-key tile, merged through shared memory
// at the end. Each warp gathers its own 16 keys of a tile into its own ring of kStages copy
// stages and waits only for its own copies (cp.async groups and __syncwarp, no __syncthreads
// until the merge), so it keeps kStages − 1 tiles in flight while it computes one. The cache
// offsets of the warp's 16 keys are computed a tile ahead, once per key (lane l < 16 takes key
// l: one block-table load, one 32-bit division), and reach the lanes copying the key's pieces by
// shuffles (per piece, before its copy, they cost 1.37× the time at batch 256: H200,
// docs/benchmarks.md).
//
// BF16 cache: BF16 MMAs over the padded tiles, as the prefill kernel. FP8 cache: the codes stay
// codes in shared memory (half the bytes of a stage) and become FP16 in registers right before
// FP16 MMAs (attention_mma.cuh's attend_tile_fp8: exact; no expansion pass through shared memory).
// Pure decode steps on an FP8 cache with many (sequence, KV head) pairs take the pair kernel
// instead (paged_attention_decode_pairs.cu).
//
// The split over the context (grid.z): at small batches one CTA per (sequence, KV head) would
// leave most SMs idle, so the context is cut into chunks of whole tiles; rows spanning several
// chunks leave partial states (maximum, sum, unnormalized output) that the last of the tile's
// chunks to finish merges (merge counters), or else the reduce kernel (paged_attention.cu); rows
// within one chunk are written whole.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/attention/attention_mma.cuh"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda::attention_detail {
namespace {

constexpr int kWarpKeys = kBN / kFlashWarps;  // keys of a tile per warp

// The CTAs an SM the kernel is compiled for (__launch_bounds__). BF16: 1 (two CTAs an SM by
// shared memory). FP8: 4 (≤ 128 registers, a few spills, 3 copy stages): left to itself the
// compiler takes 189 registers, two CTAs an SM, and the kernel ran 17 % slower at batch 256 (H200,
// 1k context: 253.4 against 216.3 µs; docs/benchmarks.md). A form for three CTAs an SM (≤ 168
// registers, 4 stages) never measured faster (docs/results/issue19/README.md, sessions 7–8) and
// was retired in issue 40.
template <KvElement E>
constexpr int kDecodeMinCtas = kIsFp8<E> ? 4 : 1;

template <int HD, KvElement E>
struct WarpDecodeSmem {
  static constexpr bool kFp8 = kIsFp8<E>;
  static constexpr int kStride = HD + 8;                   // bf16 elements per row of Q / a BF16 key
  static constexpr int kRow = kFp8 ? HD : kStride * 2;     // bytes per key in a copy stage
  // Stages per warp: 3 (2 tiles in flight; at HD = 128, BF16 109 KB a CTA: two CTAs an SM; FP8
  // 52 KB: four CTAs an SM).
  static constexpr int kStages = 3;
  static constexpr int kStage = 2 * kWarpKeys * kRow;  // the warp's K then V keys of a tile
  static constexpr int kQ = kKeySplitRows * kStride * 2;
  static constexpr int kUsed = kQ + kFlashWarps * kStages * kStage;
  static constexpr int kBytes = kUsed > kKeySplitMergeBytes<HD> ? kUsed : kKeySplitMergeBytes<HD>;
};

template <int HD, KvElement E>
__global__ void __launch_bounds__(kFlashThreads, kDecodeMinCtas<E>) warp_decode_kernel(const FlashArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  using S = WarpDecodeSmem<HD, E>;
  constexpr bool kFp8 = S::kFp8;
  constexpr int kStages = S::kStages;
  extern __shared__ __align__(16) unsigned char wsmem[];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int seq = int(blockIdx.x / unsigned(a.tiles));
  const int tile = a.tiles - 1 - int(blockIdx.x % unsigned(a.tiles));
  const int chunk = int(blockIdx.z);
  const int n = a.seq_num_tokens[seq];
  if (a.decode_max_new_tokens > 0 && n > a.decode_max_new_tokens) return;  // the prefill kernel's
  const int G = a.group;
  const int rows_total = n * G;
  const int r0 = tile * kKeySplitRows;
  if (r0 >= rows_total) return;
  const int kvh = int(blockIdx.y);
  const int64_t start = a.seq_start_position[seq];
  const int64_t first_row = a.seq_first_row[seq];
  const int r_end = r0 + kKeySplitRows < rows_total ? r0 + kKeySplitRows : rows_total;
  const int64_t p_first = start + r0 / G, p_last = start + (r_end - 1) / G;
  const int64_t lo_first = window_lo(p_first, a.window), lo_last = window_lo(p_last, a.window);
  int64_t jt_first = lo_first / kBN, jt_last = p_last / kBN;
  if (a.chunks > 1) {
    const int64_t c0 = int64_t(chunk) * a.chunk_tiles;
    jt_first = jt_first > c0 ? jt_first : c0;
    jt_last = jt_last < c0 + a.chunk_tiles - 1 ? jt_last : c0 + a.chunk_tiles - 1;
    if (jt_first > jt_last) return;  // no row of this CTA sees a key of this chunk
  }
  const bool partial_rows = r_end - r0 < kKeySplitRows;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const int64_t q_stride = int64_t(a.num_heads) * HD;
  const int warp_key = warp * kWarpKeys;

  // This thread's rows: fragment rows lane / 4 and lane / 4 + 8.
  const LaneRows rows = lane_rows(r0 + lane / 4, 8, rows_total, G, start, a.window);
  const auto &pos_r = rows.pos, &lo_r = rows.lo;
  const auto &tok_r = rows.tok, &head_r = rows.head;
  const auto& ok_r = rows.ok;

  // Q tile (zeros past the sequence's rows), copied by the whole CTA: the first copy group.
  {
    constexpr int kCpr = HD / 8;
    for (int idx = tid; idx < kKeySplitRows * kCpr; idx += kFlashThreads) {
      const int r = idx / kCpr, ch = idx % kCpr, gr = r0 + r;
      const bool ok = gr < rows_total;
      const __nv_bfloat16* src = a.q;
      if (ok) src = a.q + (first_row + gr / G) * q_stride + (int64_t(kvh) * G + gr % G) * HD + ch * 8;
      cp_async16(smem_addr(wsmem + (r * S::kStride + ch * 8) * 2), src, ok ? 16 : 0);
    }
    cp_async_commit();
  }
  unsigned char* ring = wsmem + S::kQ + warp * kStages * S::kStage;

  // The cache offset of this lane's key (lane & 15) of the warp's quarter of tile jt
  // (warp_key_offset), and the copy of the warp's 16 keys of a tile into a stage.
  static_assert(kWarpKeys == 16, "copy_warp_keys copies 16 keys");
  auto key_offset = [&](int64_t jt) {
    return warp_key_offset<HD, E>(jt * kBN + warp_key + (lane & 15), lo_first, p_last, table, a.block_size,
                                  a.num_kv_heads, kvh);
  };
  auto load_keys = [&](int stage, int64_t offset) {
    copy_warp_keys<HD, E, S::kRow>(ring + stage * S::kStage, offset, lane, a.k, a.v);
  };

  const int ntiles = int(jt_last - jt_first + 1);
  // Prologue: kStages − 1 tiles in flight (empty groups past the last tile keep the counting).
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < ntiles) load_keys(st, key_offset(jt_first + st));
    cp_async_commit();
  }
  int64_t next_offset = kStages - 1 < ntiles ? key_offset(jt_first + kStages - 1) : -1;
  cp_async_wait<kStages - 1>();  // the Q group
  __syncthreads();
  uint32_t qf[HD / 16][4];
  float scale_r[2] = {a.score_scale, a.score_scale};
  if constexpr (kFp8) {
    fp8_q_fragments<HD, S::kStride>(wsmem, lane, a.score_scale, qf, scale_r);
  } else {
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks)
      ldmatrix_x4(qf[ks], smem_addr(wsmem + ((lane & 15) * S::kStride + ks * 16 + (lane >> 4) * 8) * 2));
  }

  float o[HD / 8][4];
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<kStages - 2>();  // this lane's copies of tile it have landed
    __syncwarp();                  // ... and every lane's; every lane is done with tile it − 1's stage
    {
      const int ahead = it + kStages - 1;
      if (ahead < ntiles) load_keys(ahead % kStages, next_offset);
      cp_async_commit();
      // Issued now, waited for at the next iteration's copies: the table load's latency hides
      // behind this tile's MMAs.
      next_offset = ahead + 1 < ntiles ? key_offset(jt_first + ahead + 1) : -1;
    }
    const unsigned char* kb = ring + (it % kStages) * S::kStage;
    const unsigned char* vb = kb + kWarpKeys * S::kRow;
    const int64_t jtile = (jt_first + it) * kBN;
    const bool full = !partial_rows && jtile >= lo_last && jtile + kBN - 1 <= p_first;
    if constexpr (kFp8) {
      attend_tile_fp8<HD, E, kWarpKeys>(kb, vb, 0, qf, scale_r, full, jtile + warp_key, lo_r, pos_r, lane, m_r, l_r, o);
    } else {
      attend_tile<HD, kWarpKeys, S::kStride>(kb, vb, 0, qf, a.score_scale, full, jtile + warp_key, lo_r, pos_r, lane,
                                             m_r, l_r, o);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the merge reuses the space
  if (!merge_key_split_warps<HD>(wsmem, warp, lane, m_r, l_r, o)) return;

  // Warp 0 writes the rows: whole (normalized, BF16) where this chunk holds all of the row's
  // keys, else this chunk's partial state for the reduce kernel.
  const int q = lane & 3;
  const bool state_lane = q == 0;  // the lanes that hold a row's state: each quad's first
  const int64_t span = int64_t(a.chunk_tiles) * kBN;  // keys per chunk
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = quad_sum(l_r[i]);
    if (!ok_r[i]) continue;
    const int64_t c_lo = a.chunks > 1 ? lo_r[i] / span : 0, c_hi = a.chunks > 1 ? pos_r[i] / span : 0;
    if (chunk < c_lo || chunk > c_hi) continue;  // none of the row's keys here
    const int h = kvh * G + head_r[i];
    const bool whole = c_lo == c_hi;
    __nv_bfloat16* dst = a.out + (first_row + tok_r[i]) * q_stride + int64_t(h) * HD;
    const int64_t at = ((int64_t(seq) * a.tcap + tok_r[i]) * a.num_heads + h) * a.chunks + chunk;
    float* part = whole ? nullptr : a.part_o + at * HD;
#pragma unroll
    for (int pr = 0; pr < HD / 8; ++pr) {
      float x0, x1;
      const int dim = acc_pair<kFp8>(o, i, pr, q, x0, x1);
      if (whole) {
        *reinterpret_cast<__nv_bfloat162*>(dst + dim) =
            __floats2bfloat162_rn((x0 * a.v_scale) / l, (x1 * a.v_scale) / l);
      } else {
        *reinterpret_cast<float2*>(part + dim) = make_float2(x0, x1);
      }
    }
    if (!whole && state_lane) {
      a.part_m[at] = m_r[i];
      a.part_l[at] = l;
    }
  }
  if (a.chunks == 1 || a.merge_counters == nullptr) return;

  // The last of this (sequence, row tile, KV head)'s chunks to finish merges its rows that span
  // several chunks, and leaves the counter at zero for the next call.
  const int64_t c_first = (lo_first / kBN) / a.chunk_tiles, c_last = (p_last / kBN) / a.chunk_tiles;
  unsigned* counter = a.merge_counters + (int64_t(seq) * a.tiles + tile) * a.num_kv_heads + kvh;
  __threadfence();
  __syncwarp();
  unsigned last = 0;
  if (lane == 0) last = atomicAdd(counter, 1u) == unsigned(c_last - c_first) ? 1u : 0u;
  if (__shfl_sync(kFullMask, last, 0) == 0) return;
  __threadfence();
  for (int gr = r0; gr < r_end; ++gr) {
    const int tok = gr / G, h = kvh * G + gr % G;
    const int64_t pos = start + tok, c_lo = window_lo(pos, a.window) / span, c_hi = pos / span;
    if (c_lo == c_hi) continue;  // written whole
    merge_partials_warp(a.part_o, a.part_m, a.part_l, ((int64_t(seq) * a.tcap + tok) * a.num_heads + h) * a.chunks,
                        int(c_lo), int(c_hi), HD, a.v_scale, a.out + (first_row + tok) * q_stride + int64_t(h) * HD,
                        lane);
  }
  if (lane == 0) *counter = 0;
}

template <int HD, KvElement E>
void launch(const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  constexpr int kBytes = WarpDecodeSmem<HD, E>::kBytes;
  auto* kernel = warp_decode_kernel<HD, E>;
  // A host call (not a stream operation: allowed while capturing a graph), per device.
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  launch_dependent(kernel, dim3(blocks, unsigned(a.num_kv_heads), unsigned(a.chunks)), kFlashThreads, kBytes, stream, a);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void launch_e(KvElement e, const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  switch (e) {
    case KvElement::kBF16: launch<HD, KvElement::kBF16>(a, blocks, stream); break;
    case KvElement::kE4M3: launch<HD, KvElement::kE4M3>(a, blocks, stream); break;
    case KvElement::kE5M2: launch<HD, KvElement::kE5M2>(a, blocks, stream); break;
    default: throw Error("cuda paged attention: no warp decode kernel for kv element type " + std::to_string(int(e)));
  }
}

}  // namespace

void launch_warp_decode(int head_dim, KvElement element, const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  if (head_dim == 64) launch_e<64>(element, a, blocks, stream);
  else if (head_dim == 128) launch_e<128>(element, a, blocks, stream);
  else throw Error("cuda paged attention: no warp decode kernel for head_dim " + std::to_string(head_dim));
}

}  // namespace fp8lm::cuda::attention_detail
