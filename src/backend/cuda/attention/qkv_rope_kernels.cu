// split_norm_rope_qkv (qkv_rope_kernels.h). Shape of the kernel: a CTA of 128
// threads takes a few heads of one row (grid: rows × chunks of heads), a group
// of lanes per head laid out as head_rms_norm's (head_lanes), so each head's
// sum of squares is the same sum in the same order. The CTA first writes its
// row's cos/sin (rope_cos_sin) to shared memory; each group loads its head
// from qkv, norms it and rounds it to BF16 (what head_rms_norm stores and
// rope_qk reads back), puts it in shared memory, and after one barrier writes
// every element rotated against its rotate-half partner. v heads are copied.
#include "backend/cuda/attention/qkv_rope_kernels.h"

#include <climits>
#include <cstdint>
#include <string>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/attention/kv_store_device.cuh"
#include "backend/cuda/common/norm_rope_device.cuh"
#include "backend/cuda/common/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 128;  // as head_rms_norm's CTAs; 128 / group heads per CTA

struct QkvArgs {
  const uint16_t* qkv = nullptr;
  int64_t ld = 0;  // qkv's row: q_cols + k_cols + v_cols
  uint16_t* q = nullptr;
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int q_heads = 0, k_heads = 0, v_heads = 0;  // per row
  int head_dim = 0, half = 0;
  int group = 1;          // lanes per head (head_lanes)
  int heads_per_cta = 0;  // kThreads / group
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 0.0f;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  float attention_factor = 1.0f;
  // store_kv fused in (cache.k null: not): the rotated k and the v heads also go to the cache.
  DeviceKvLayer cache;
  const int32_t* row_seq = nullptr;
  const int32_t* block_tables = nullptr;
  int max_blocks_per_seq = 0, block_size = 0;
};

// The cache block of the row's position, or -1 where store_kv skips the row (a position
// outside its block table row).
__device__ __forceinline__ int64_t cache_block(const QkvArgs& a, int64_t row, int64_t pos) {
  if (a.cache.k == nullptr || pos < 0 || pos >= int64_t(a.max_blocks_per_seq) * a.block_size) return -1;
  return a.block_tables[int64_t(a.row_seq[row]) * a.max_blocks_per_seq + pos / a.block_size];
}

template <int VPL, bool kVec, bool kNorm>
__global__ void __launch_bounds__(kThreads) split_norm_rope_kernel(QkvArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  extern __shared__ float smem[];  // cos [half], sin [half], then one head [head_dim] per group
  const int hd = a.head_dim, half = a.half, g = a.group;
  float* cs = smem;
  float* sn = smem + half;
  const int64_t row = blockIdx.x;
  const int32_t pos = a.positions[row];
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x))
    rope_cos_sin(pos, a.inv_freq[i], a.attention_factor, cs[i], sn[i]);

  const int slot = int(threadIdx.x) / g, lane = int(threadIdx.x) & (g - 1);
  float* hs = smem + 2 * half + slot * hd;
  // The group's head: the j-th of the row's q, k, v heads, which lie in that order in qkv.
  const int j = int(blockIdx.y) * a.heads_per_cta + slot;
  const bool is_q = j < a.q_heads;
  const bool is_k = !is_q && j < a.q_heads + a.k_heads;
  const bool is_v = !is_q && !is_k && j < a.q_heads + a.k_heads + a.v_heads;
  const bool rotated = is_q || is_k;
  const uint16_t* src = a.qkv + row * a.ld + int64_t(j) * hd;
  uint16_t* dst = nullptr;
  if (is_q) dst = a.q + (row * a.q_heads + j) * hd;
  else if (is_k) dst = a.k + (row * a.k_heads + (j - a.q_heads)) * hd;
  else if (is_v) dst = a.v + (row * a.v_heads + (j - a.q_heads - a.k_heads)) * hd;

  // The fused store_kv (vector path only: the host stores separately otherwise).
  const int64_t block = kVec && (is_k || is_v) ? cache_block(a, row, pos) : -1;
  const int kv_head = is_k ? j - a.q_heads : j - a.q_heads - a.k_heads;

  if (is_v) {  // split_columns' copy: the bits as they are
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e0 = (lane + i * g) * 8;
      if (e0 >= hd) continue;
      if constexpr (kVec) {
        const uint4 bits = *reinterpret_cast<const uint4*>(src + e0);
        *reinterpret_cast<uint4*>(dst + e0) = bits;
        if (block >= 0)
          store_kv8(a.cache.element, a.cache.v, kv_cache_index(block, kv_head, a.v_heads, pos, a.block_size, hd, e0),
                    bits, a.cache.v_scale);
      } else {
        for (int e = e0; e < e0 + 8 && e < hd; ++e) dst[e] = src[e];
      }
    }
  }

  // q and k: head_rms_norm_kernel's loads, sum and scaling, rounded to BF16 as it stores.
  float x[VPL][8];
#pragma unroll
  for (int i = 0; i < VPL; ++i) {
    const int e0 = (lane + i * g) * 8;
    if (rotated && e0 < hd) {
      load8<kVec>(src + e0, hd - e0, x[i]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[i][e] = 0.0f;
    }
  }
  if constexpr (kNorm) {
    double ss = 0.0;
#pragma unroll
    for (int i = 0; i < VPL; ++i) ss = sum_squares(x[i], ss);
    ss = group_sum(ss, g);  // every lane of the warp takes part
    const float inv = rms_inv(ss, hd, a.eps);
    const float* w = is_q ? a.q_norm : a.k_norm;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e0 = (lane + i * g) * 8;
      if (rotated && e0 < hd) {
        float wv[8];
        load8<kVec>(w + e0, hd - e0, wv);
        scale8(x[i], wv, inv);
#pragma unroll
        for (int e = 0; e < 8; ++e) x[i][e] = round_bf16(x[i][e]);
      }
    }
  }
  if (rotated) {
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
      const int e0 = (lane + i * g) * 8;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (e0 + e < hd) hs[e0 + e] = x[i][e];
    }
  }
  __syncthreads();  // cos/sin and every group's head are in shared memory

  if (!rotated) return;
  // rope_qk's rotation of each element against its partner half a head away.
#pragma unroll
  for (int i = 0; i < VPL; ++i) {
    const int e0 = (lane + i * g) * 8;
    if (e0 >= hd) continue;
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int c = e0 + e;
      if (c >= hd) o[e] = 0.0f;
      else if (c < half) o[e] = rope_first(hs[c], hs[c + half], cs[c], sn[c]);
      else o[e] = rope_second(hs[c - half], hs[c], cs[c - half], sn[c - half]);
    }
    store8<kVec>(dst + e0, hd - e0, o);
    if (is_k && block >= 0) {  // the BF16 values just stored, as store_kv would read them back
      const uint4 bits = make_uint4(bf16_bits(o[0]) | (bf16_bits(o[1]) << 16), bf16_bits(o[2]) | (bf16_bits(o[3]) << 16),
                                    bf16_bits(o[4]) | (bf16_bits(o[5]) << 16), bf16_bits(o[6]) | (bf16_bits(o[7]) << 16));
      store_kv8(a.cache.element, a.cache.k, kv_cache_index(block, kv_head, a.k_heads, pos, a.block_size, hd, e0),
                bits, a.cache.k_scale);
    }
  }
}

[[noreturn]] void fail(const std::string& what) { throw Error("cuda split_norm_rope_qkv: " + what); }

int heads_of(int64_t cols, int64_t head_dim, const char* name) {
  if (cols % head_dim != 0)
    fail(std::string(name) + " width " + std::to_string(cols) + " is not a multiple of head_dim " +
         std::to_string(head_dim));
  return int(cols / head_dim);
}

template <int VPL, bool kVec>
void launch_kernel(const QkvArgs& a, bool norm, dim3 grid, size_t smem, cudaStream_t stream) {
  if (norm) launch_dependent(split_norm_rope_kernel<VPL, kVec, true>, grid, kThreads, smem, stream, a);
  else launch_dependent(split_norm_rope_kernel<VPL, kVec, false>, grid, kThreads, smem, stream, a);
}

template <bool kVec>
void launch_vpl(const QkvArgs& a, int vpl, bool norm, dim3 grid, size_t smem, cudaStream_t stream) {
  switch (vpl) {
    case 1: launch_kernel<1, kVec>(a, norm, grid, smem, stream); break;
    case 2: launch_kernel<2, kVec>(a, norm, grid, smem, stream); break;
    default: launch_kernel<4, kVec>(a, norm, grid, smem, stream); break;  // head_dim ≤ 1024
  }
}

}  // namespace

void split_norm_rope_qkv(const __nv_bfloat16* qkv, int64_t rows, int64_t q_cols, int64_t k_cols, int64_t v_cols,
                         int64_t head_dim, __nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v, const float* q_norm,
                         const float* k_norm, float eps, const int32_t* positions, const float* inv_freq,
                         float attention_factor, cudaStream_t stream, const KvStore* store) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim || head_dim % 2 != 0)
    fail("head_dim must be even and in [2, " + std::to_string(kMaxHeadDim) + "], got " + std::to_string(head_dim));
  if (rows < 0) fail("negative row count " + std::to_string(rows));
  if (rows > INT_MAX) fail("at most 2^31 - 1 rows, got " + std::to_string(rows));
  constexpr int64_t kMaxCols = int64_t(1) << 30;  // int-indexed inside a row
  if (q_cols < 0 || k_cols < 0 || v_cols < 0 || q_cols > kMaxCols || k_cols > kMaxCols || v_cols > kMaxCols ||
      q_cols + k_cols + v_cols > kMaxCols)
    fail("q, k, v widths " + std::to_string(q_cols) + ", " + std::to_string(k_cols) + ", " + std::to_string(v_cols) +
         " must be >= 0 and add up to at most 2^30");
  QkvArgs a;
  a.q_heads = heads_of(q_cols, head_dim, "q");
  a.k_heads = heads_of(k_cols, head_dim, "k");
  a.v_heads = heads_of(v_cols, head_dim, "v");
  if ((q_norm == nullptr) != (k_norm == nullptr)) fail("q and k norm weights: both or neither");
  a.ld = q_cols + k_cols + v_cols;
  if (rows == 0 || a.ld == 0) return;
  if (qkv == nullptr) fail("qkv is null");
  if (positions == nullptr || inv_freq == nullptr) fail("positions or inv_freq is null");
  if ((a.q_heads > 0 && q == nullptr) || (a.k_heads > 0 && k == nullptr) || (a.v_heads > 0 && v == nullptr))
    fail("an output with columns is null");
  const bool norm = q_norm != nullptr;
  const HeadLanes lanes = head_lanes(int(head_dim));
  a.qkv = reinterpret_cast<const uint16_t*>(qkv);
  a.q = reinterpret_cast<uint16_t*>(q);
  a.k = reinterpret_cast<uint16_t*>(k);
  a.v = reinterpret_cast<uint16_t*>(v);
  a.head_dim = int(head_dim);
  a.half = int(head_dim / 2);
  a.group = lanes.group;
  a.heads_per_cta = kThreads / lanes.group;
  a.q_norm = q_norm;
  a.k_norm = k_norm;
  a.eps = eps;
  a.positions = positions;
  a.inv_freq = inv_freq;
  a.attention_factor = attention_factor;
  const int64_t heads = int64_t(a.q_heads) + a.k_heads + a.v_heads;
  const int64_t chunks = (heads + a.heads_per_cta - 1) / a.heads_per_cta;
  if (chunks > 65535) fail("too many heads in a row: " + std::to_string(heads));
  // Vectors: 16-byte aligned bases; every head starts a multiple of 8 elements in.
  bool vec = head_dim % 8 == 0 && aligned16(qkv);
  if (a.q_heads > 0) vec = vec && aligned16(q);
  if (a.k_heads > 0) vec = vec && aligned16(k);
  if (a.v_heads > 0) vec = vec && aligned16(v);
  if (norm) vec = vec && aligned16(q_norm) && aligned16(k_norm);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
  // ≤ (1024 + 4 · 1024) floats: 20 KiB at head_dim 1024, under the default 48 KiB.
  const size_t smem = size_t(head_dim + int64_t(a.heads_per_cta) * head_dim) * sizeof(float);
  // store_kv fused in where the kernel takes the vector path, the cache's heads are k's and the
  // positions are the batch's (store_kv's).
  const bool fuse_store = store != nullptr && vec && a.k_heads == a.v_heads && a.k_heads == store->num_kv_heads &&
                          store->batch != nullptr && positions == store->batch->row_position;
  if (store != nullptr && !(aligned16(k) && aligned16(v) && head_dim % 8 == 0))
    fail("with a KV store, k and v must be 16-byte aligned and head_dim a multiple of 8 (store_kv's layout)");
  if (fuse_store) {
    const DeviceAttentionBatch& b = *store->batch;
    if (b.num_rows != rows) fail("the KV store's batch has " + std::to_string(b.num_rows) + " rows, qkv " +
                                 std::to_string(rows));
    if (b.row_seq == nullptr || b.block_tables == nullptr || b.max_blocks_per_seq <= 0 || store->block_size <= 0)
      fail("the KV store's batch metadata are incomplete");
    if (store->layer.k == nullptr || store->layer.v == nullptr) fail("the KV store's layer has no K or V array");
    a.cache = store->layer;
    a.row_seq = b.row_seq;
    a.block_tables = b.block_tables;
    a.max_blocks_per_seq = b.max_blocks_per_seq;
    a.block_size = store->block_size;
  }
  if (vec) launch_vpl<true>(a, lanes.vpl, norm, grid, smem, stream);
  else launch_vpl<false>(a, lanes.vpl, norm, grid, smem, stream);
  FP8LM_CUDA_CHECK(cudaGetLastError());
  if (store != nullptr && !fuse_store) {
    if (store->batch == nullptr) fail("the KV store has no batch");
    store_kv(k, v, *store->batch, store->num_kv_heads, head_dim, store->block_size, store->layer, stream);
  }
}

}  // namespace fp8lm::cuda
