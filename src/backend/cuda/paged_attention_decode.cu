// The warp-pipelined decode form of the tensor-core attention (attention_mma.cuh's
// launch_warp_decode): a decode step of many sequences, one CTA per (sequence, 16 packed rows,
// KV head), each of its 4 warps a quarter of every 64-key tile — the key split of
// paged_attention.cu's flash kernel — but each warp gathers its own 16 keys of a tile into its
// own ring of kStages copy stages and waits only for its own copies (cp.async groups and
// __syncwarp, no __syncthreads until the merge). So a warp keeps kStages − 1 tiles in flight
// while it computes one, instead of the CTA's one, and an FP8 cache keeps its tiles as codes
// (half the bytes of a stage) until the warp expands its own 16 keys to BF16 just before its
// MMAs. Same arithmetic as the flash kernel's key-split form, in the same order: the same output
// bits.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/check.h"
#include "backend/cuda/device_helpers.cuh"
#include "backend/cuda/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda::attention_detail {
namespace {

constexpr int kWarpKeys = kBN / kFlashWarps;  // keys of a tile per warp

template <int HD, KvElement E>
struct WarpDecodeSmem {
  static constexpr bool kFp8 = kIsFp8<E>;
  static constexpr int kStride = HD + 8;                   // bf16 elements per row of Q / an expanded key
  static constexpr int kRawRow = kFp8 ? HD : kStride * 2;  // bytes per key in a copy stage
  // Stages per warp: BF16 3 (2 tiles in flight), FP8 4 (3 in flight at half the bytes); two CTAs
  // fit an SM either way (HD = 128: 109 KB, 105 KB).
  static constexpr int kStages = kFp8 ? 4 : 3;
  static constexpr int kStage = 2 * kWarpKeys * kRawRow;           // the warp's K then V keys of a tile
  static constexpr int kExpanded = kFp8 ? 2 * kWarpKeys * kStride * 2 : 0;  // its K, V as BF16
  static constexpr int kWarp = kStages * kStage + kExpanded;
  static constexpr int kQ = kKeySplitRows * kStride * 2;
  static constexpr int kUsed = kQ + kFlashWarps * kWarp;
  static constexpr int kBytes = kUsed > kKeySplitMergeBytes<HD> ? kUsed : kKeySplitMergeBytes<HD>;
};

// kOffsetsAhead (opt-in, FP8LM_CUDA_DECODE_OFFSETS_AHEAD=1; built, not yet measured): the cache
// offsets of the warp's 16 keys of a tile are computed once per key — lane l < 16 takes key l: one
// block-table load and one 32-bit division — a tile before the copies that need them, and reach the
// lanes copying the key's pieces by shuffles. Without it every lane loads the table entry and
// divides in 64 bits for each 16-byte piece it copies, just before the copy: at batch 256 the
// kernel takes as long for an FP8 cache as for a BF16 one, so its time is not in the bytes.
template <int HD, KvElement E, bool kOffsetsAhead>
__global__ void __launch_bounds__(kFlashThreads) warp_decode_kernel(const FlashArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  using S = WarpDecodeSmem<HD, E>;
  constexpr int kStages = S::kStages;
  extern __shared__ __align__(16) unsigned char wsmem[];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int seq = int(blockIdx.x / unsigned(a.tiles));
  const int tile = a.tiles - 1 - int(blockIdx.x % unsigned(a.tiles));
  const int n = a.seq_num_tokens[seq];
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
  const bool partial_rows = r_end - r0 < kKeySplitRows;
  const int32_t* table = a.block_tables + int64_t(seq) * a.max_blocks_per_seq;
  const int64_t q_stride = int64_t(a.num_heads) * HD;
  const int warp_key = warp * kWarpKeys;

  // This thread's rows: fragment rows lane / 4 and lane / 4 + 8.
  int64_t pos_r[2], lo_r[2];
  int tok_r[2], head_r[2];
  bool ok_r[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + lane / 4 + 8 * i;
    ok_r[i] = r < rows_total;
    tok_r[i] = r / G;
    head_r[i] = r % G;
    pos_r[i] = ok_r[i] ? start + tok_r[i] : -1;  // −1: every key masked
    lo_r[i] = ok_r[i] ? window_lo(pos_r[i], a.window) : 0;
  }

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
  unsigned char* ring = wsmem + S::kQ + warp * S::kWarp;
  unsigned char* expanded = ring + kStages * S::kStage;

  // kOffsetsAhead: the byte offset in the cache of key (lane & 15) of tile jt, −1 where it is
  // not gathered; the lanes copying a key's pieces take it from that lane.
  auto key_offset = [&](int64_t jt) -> int64_t {
    const int64_t j = jt * kBN + warp_key + (lane & 15);
    if (j < lo_first || j > p_last) return -1;
    const int jj = int(j), bs = a.block_size;  // positions fit an int (max_model_len)
    const int64_t block = table[jj / bs];
    return ((block * a.num_kv_heads + kvh) * bs + jj % bs) * HD * kElemBytes<E>;
  };
  // The warp's 16 keys of tile jt into a stage: keys [lo_first, p_last] gathered, others
  // zero-filled without touching the block table (blocks outside a sliding window may already
  // be someone else's). offset: with kOffsetsAhead, this lane's key_offset(jt); else unused.
  auto load_keys = [&](int stage, int64_t jt, int64_t offset) {
    constexpr int kCpr = HD * kElemBytes<E> / 16;
    static_assert(kWarpKeys * kCpr % 32 == 0, "every lane shuffles as often");
    unsigned char* kdst = ring + stage * S::kStage;
    unsigned char* vdst = kdst + kWarpKeys * S::kRawRow;
    for (int idx = lane; idx < kWarpKeys * kCpr; idx += 32) {
      const int key = idx / kCpr, ch = idx % kCpr;
      bool ok;
      int64_t off = 0;
      if constexpr (kOffsetsAhead) {
        const int64_t key_off = __shfl_sync(kFullMask, offset, key);
        ok = key_off >= 0;
        if (ok) off = key_off + ch * 16;
      } else {
        const int64_t j = jt * kBN + warp_key + key;
        ok = j >= lo_first && j <= p_last;
        if (ok) {
          const int64_t block = table[j / a.block_size];
          off = ((block * a.num_kv_heads + kvh) * a.block_size + j % a.block_size) * HD * kElemBytes<E> + ch * 16;
        }
      }
      cp_async16(smem_addr(kdst + key * S::kRawRow + ch * 16), static_cast<const unsigned char*>(a.k) + off,
                 ok ? 16 : 0);
      cp_async16(smem_addr(vdst + key * S::kRawRow + ch * 16), static_cast<const unsigned char*>(a.v) + off,
                 ok ? 16 : 0);
    }
  };

  const int64_t jt_first = lo_first / kBN, jt_last = p_last / kBN;
  const int ntiles = int(jt_last - jt_first + 1);
  // Prologue: kStages − 1 tiles in flight (empty groups past the last tile keep the counting).
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < ntiles) load_keys(st, jt_first + st, kOffsetsAhead ? key_offset(jt_first + st) : 0);
    cp_async_commit();
  }
  int64_t next_offset = -1;  // kOffsetsAhead: this lane's key offset of the next tile to copy
  if constexpr (kOffsetsAhead) next_offset = kStages - 1 < ntiles ? key_offset(jt_first + kStages - 1) : -1;
  cp_async_wait<kStages - 1>();  // the Q group
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks)
    ldmatrix_x4(qf[ks], smem_addr(wsmem + ((lane & 15) * S::kStride + ks * 16 + (lane >> 4) * 8) * 2));

  float o[HD / 8][4];
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<kStages - 2>();  // this lane's copies of tile it have landed
    __syncwarp();                  // ... and every lane's; every lane is done with tile it − 1's stage
    {
      const int ahead = it + kStages - 1;
      if (ahead < ntiles) load_keys(ahead % kStages, jt_first + ahead, next_offset);
      cp_async_commit();
      // Issued now, waited for at the next iteration's copies: the table load's latency hides
      // behind this tile's MMAs.
      if constexpr (kOffsetsAhead) next_offset = ahead + 1 < ntiles ? key_offset(jt_first + ahead + 1) : -1;
    }
    const int64_t jt = jt_first + it;
    const unsigned char* kb = ring + (it % kStages) * S::kStage;
    const unsigned char* vb = kb + kWarpKeys * S::kRawRow;
    if constexpr (S::kFp8) {
      // Expand the warp's codes to exact BF16 values.
      constexpr int kCpr = HD / 16;  // 16 codes per piece
      for (int idx = lane; idx < 2 * kWarpKeys * kCpr; idx += 32) {
        const int which = idx / (kWarpKeys * kCpr), rem = idx % (kWarpKeys * kCpr), key = rem / kCpr,
                  ch = rem % kCpr;
        expand_fp8x16<E>(kb + which * kWarpKeys * S::kRawRow + key * HD + ch * 16,
                         expanded + (which * kWarpKeys * S::kStride + key * S::kStride + ch * 16) * 2);
      }
      __syncwarp();
      kb = expanded;
      vb = expanded + kWarpKeys * S::kStride * 2;
    }

    const int64_t jtile = jt * kBN;
    const bool full = !partial_rows && jtile >= lo_last && jtile + kBN - 1 <= p_first;
    attend_tile<HD, kWarpKeys, S::kStride>(kb, vb, 0, qf, a.score_scale, full, jtile + warp_key, lo_r, pos_r, lane,
                                           m_r, l_r, o);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the merge reuses the space
  if (!merge_key_split_warps<HD>(wsmem, warp, lane, m_r, l_r, o)) return;
  write_attention_rows<HD>(a, first_row, kvh, ok_r, tok_r, head_r, lane, l_r, o);
}

template <int HD, KvElement E, bool kOffsetsAhead>
void launch_kernel(const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  constexpr int kBytes = WarpDecodeSmem<HD, E>::kBytes;
  auto* kernel = warp_decode_kernel<HD, E, kOffsetsAhead>;
  // A host call (not a stream operation: allowed while capturing a graph), per device.
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  launch_dependent(kernel, dim3(blocks, unsigned(a.num_kv_heads)), kFlashThreads, kBytes, stream, a);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

template <int HD, KvElement E>
void launch(const FlashArgs& a, unsigned blocks, cudaStream_t stream) {
  static const bool ahead = [] {
    const char* v = std::getenv("FP8LM_CUDA_DECODE_OFFSETS_AHEAD");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (ahead) launch_kernel<HD, E, true>(a, blocks, stream);
  else launch_kernel<HD, E, false>(a, blocks, stream);
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
