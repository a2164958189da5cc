// The FP8 decode kernel for many (sequence, KV head) pairs: one warp per pair over its whole
// context, four pairs a CTA, no merge. The key-split kernel (paged_attention_decode.cu) gives a
// pair a CTA of four warps, each a quarter of every 64-key tile, merged through shared memory at
// the end: at short contexts its fixed cost per CTA (Q tile, prologue, cross-warp merge) stands
// beside only a few tiles per warp (H200, 128 in / 128 out at 1,024 sequences: 355 µs a layer,
// ~4× its bandwidth roofline; docs/benchmarks.md). Here a warp walks its pair's keys 16 at a time
// through its own ring of copy stages (cp.async groups and __syncwarp only, no __syncthreads), so
// as many keys are in flight per warp as in the key-split kernel, its state is final when the
// walk ends, and its rows are written directly.
//
// The tiles are the transposed FP8 tiles of decode_mma_t.cuh (keys and dimensions as the MMAs' M,
// the ≤ 8 rows as N): the decode rows of steps whose decoding sequences' rows fit kDecodeTRows
// (in a step that also prefills, the prefilling sequences' warps return at once). No split over
// the context: the dispatch (paged_attention.cu) takes this kernel only where pairs are many.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/attention/attention_mma.cuh"
#include "backend/cuda/common/check.h"
#include "backend/cuda/attention/decode_mma_t.cuh"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda::attention_detail {
namespace {

constexpr int kPairKeys = 16;  // keys per step of a warp: the transposed tile's M

// Per warp: kStages copy stages of 16 keys' K then V codes (3: two steps in flight while one is
// computed; 48 KB a CTA at HD = 128, four CTAs an SM). The Q rows wait in the last stage, which
// the first step's copies overwrite only after the fragments are built.
template <int HD>
struct PairDecodeSmem {
  static constexpr int kStages = 3;
  static constexpr int kStage = 2 * kPairKeys * HD;
  static constexpr int kQStride = HD + 8;  // bf16 elements per Q row
  static_assert(kDecodeTRows * kQStride * 2 <= kStage, "the Q rows fit one stage");
  static constexpr int kWarp = kStages * kStage;
  static constexpr int kBytes = kFlashWarps * kWarp;
};

template <int HD, KvElement E>
__global__ void __launch_bounds__(kFlashThreads, 4) pair_decode_kernel(const FlashArgs a) {
  static_assert(kIsFp8<E>, "the transposed tiles are FP8");
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  using S = PairDecodeSmem<HD>;
  constexpr int kStages = S::kStages;
  extern __shared__ __align__(16) unsigned char psmem[];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  // Pairs in sequence-major order: a CTA's warps are heads of one sequence (equal lengths).
  const int64_t pair = int64_t(blockIdx.x) * kFlashWarps + warp;
  if (pair >= int64_t(a.num_seqs) * a.num_kv_heads) return;
  const int seq = int(pair / a.num_kv_heads), kvh = int(pair % a.num_kv_heads);
  const int n = a.seq_num_tokens[seq];
  if (a.decode_max_new_tokens > 0 && n > a.decode_max_new_tokens) return;  // the prefill kernel's
  const int G = a.group;
  const int rows_total = n * G;  // ≤ kDecodeTRows for the decode rows (launch_pair_decode's caller)
  const int64_t start = a.seq_start_position[seq];
  const int64_t first_row = a.seq_first_row[seq];
  const int64_t p_first = start, p_last = start + n - 1;
  const int64_t lo_first = window_lo(p_first, a.window), lo_last = window_lo(p_last, a.window);
  const int64_t jt_first = lo_first / kPairKeys, jt_last = p_last / kPairKeys;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const int64_t q_stride = int64_t(a.num_heads) * HD;

  // This lane's rows 2q, 2q + 1 (lane = 4g + q).
  const LaneRows rows = lane_rows(2 * (lane & 3), 1, rows_total, G, start, a.window);
  const auto &pos_r = rows.pos, &lo_r = rows.lo;
  const auto &tok_r = rows.tok, &head_r = rows.head;
  const auto& ok_r = rows.ok;

  unsigned char* ring = psmem + warp * S::kWarp;
  unsigned char* qs = ring + (kStages - 1) * S::kStage;
  {  // Q rows (zeros past the sequence's): the first copy group.
    constexpr int kCpr = HD / 8;
    for (int idx = lane; idx < kDecodeTRows * kCpr; idx += 32) {
      const int r = idx / kCpr, ch = idx % kCpr;
      const bool ok = r < rows_total;
      const __nv_bfloat16* src = a.q;
      if (ok) src = a.q + (first_row + r / G) * q_stride + (int64_t(kvh) * G + r % G) * HD + ch * 8;
      cp_async16(smem_addr(qs + (r * S::kQStride + ch * 8) * 2), src, ok ? 16 : 0);
    }
    cp_async_commit();
  }

  // The cache offset of this lane's key (lane & 15) of step jt (warp_key_offset), and the copy
  // of a step's 16 keys into a stage (swizzled as the transposed tiles read them).
  static_assert(kPairKeys == 16, "copy_warp_keys copies 16 keys");
  auto key_offset = [&](int64_t jt) {
    return warp_key_offset<HD, E>(jt * kPairKeys + (lane & 15), lo_first, p_last, table, a.block_size,
                                  a.num_kv_heads, kvh);
  };
  auto load_keys = [&](int stage, int64_t offset) {
    copy_warp_keys<HD, E, HD>(ring + stage * S::kStage, offset, lane, a.k, a.v);
  };

  const int nsteps = int(jt_last - jt_first + 1);
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < nsteps) load_keys(st, key_offset(jt_first + st));
    cp_async_commit();
  }
  int64_t next_offset = kStages - 1 < nsteps ? key_offset(jt_first + kStages - 1) : -1;
  cp_async_wait<kStages - 1>();  // the Q group
  __syncwarp();
  uint32_t qf[HD / 16][2];
  float scale_r[2];
  fp8_qt_fragments<HD, S::kQStride>(qs, lane, a.score_scale, qf, scale_r);

  float o[HD / 16][4];
#pragma unroll
  for (int d = 0; d < HD / 16; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};

  for (int it = 0; it < nsteps; ++it) {
    cp_async_wait<kStages - 2>();  // this lane's copies of step it have landed
    __syncwarp();                  // ... and every lane's; the stage of step it − 1 (or Q) is free
    {
      const int ahead = it + kStages - 1;
      if (ahead < nsteps) load_keys(ahead % kStages, next_offset);
      cp_async_commit();
      next_offset = ahead + 1 < nsteps ? key_offset(jt_first + ahead + 1) : -1;
    }
    const unsigned char* kb = ring + (it % kStages) * S::kStage;
    const int64_t jbase = (jt_first + it) * kPairKeys;
    // Rows past the sequence's need no mask here: each is its own MMA column.
    const bool full = jbase >= lo_last && jbase + kPairKeys - 1 <= p_first;
    attend_tile_fp8_t<HD, E>(kb, kb + kPairKeys * HD, qf, scale_r, full, jbase, lo_r, pos_r, lane, m_r, l_r, o);
  }
  cp_async_wait<0>();

  // The warp's state is the rows' whole softmax: normalize and write (lane (g, q) holds
  // dimensions 16d + 2g, + 1 of rows 2q, 2q + 1).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = key_lanes_sum(l_r[i]);
    if (!ok_r[i]) continue;
    __nv_bfloat16* dst =
        a.out + (first_row + tok_r[i]) * q_stride + (int64_t(kvh) * G + head_r[i]) * HD + 2 * (lane >> 2);
    const float f = a.v_scale / l;
#pragma unroll
    for (int d = 0; d < HD / 16; ++d)
      *reinterpret_cast<__nv_bfloat162*>(dst + 16 * d) = __floats2bfloat162_rn(o[d][i] * f, o[d][2 + i] * f);
  }
}

template <int HD, KvElement E>
void launch(const FlashArgs& a, cudaStream_t stream) {
  constexpr int kBytes = PairDecodeSmem<HD>::kBytes;
  auto* kernel = pair_decode_kernel<HD, E>;
  // A host call (not a stream operation: allowed while capturing a graph), per device.
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const int64_t blocks = (int64_t(a.num_seqs) * a.num_kv_heads + kFlashWarps - 1) / kFlashWarps;
  launch_dependent(kernel, dim3(unsigned(blocks)), kFlashThreads, kBytes, stream, a);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void launch_e(KvElement e, const FlashArgs& a, cudaStream_t stream) {
  switch (e) {
    case KvElement::kE4M3: launch<HD, KvElement::kE4M3>(a, stream); break;
    case KvElement::kE5M2: launch<HD, KvElement::kE5M2>(a, stream); break;
    default: throw Error("cuda paged attention: the pair decode kernel needs an FP8 cache, got element type " +
                         std::to_string(int(e)));
  }
}

}  // namespace

void launch_pair_decode(int head_dim, KvElement element, const FlashArgs& a, cudaStream_t stream) {
  if (a.num_seqs <= 0) return;
  if (head_dim == 64) launch_e<64>(element, a, stream);
  else if (head_dim == 128) launch_e<128>(element, a, stream);
  else throw Error("cuda paged attention: no pair decode kernel for head_dim " + std::to_string(head_dim));
}

}  // namespace fp8lm::cuda::attention_detail
