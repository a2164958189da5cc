// The CUDA backend's paged KV cache writes and paged attention (Hopper, sm_90a): the GPU side
// of src/backend/cpu/kv_cache.h + src/backend/cpu/attention.h, over the same cache layout and
// the same block tables, for a batch mixing prefills, prefill chunks and decodes.
//
// The CPU reference first stores each new token's K/V, then attends over the *cached*
// (rounded, dequantized) values, its own position included. Here the two halves are separate
// calls: store_kv, then paged_attention (which only reads the cache).
//
// ---- Storing (store_kv): bit-identical to cpu::PagedKvCache::store -------------------------
//   BF16 cache: the BF16 input as is (the CPU rounds a float that is already a BF16 value: the
//   same bits). F32: widened, exact. FP8: code = device_float_to_fp8(float(x) / scale,
//   kSatFinite): an IEEE float32 division (__fdiv_rn, never × 1/scale) then clamp and
//   round-to-nearest-even, NaN sign kept (fp8_convert.cuh) — docs/numerics.md §2 and §4.
//
// ---- Attention numerics (all arithmetic in float32; K/V never rounded beyond the cache) ----
// Positions a row at position p attends: j ∈ [lo, p], lo = 0, or max(0, p − W + 1) with a
// sliding window W (the CPU's rule). For each query head, with L = p − lo + 1:
//   s_j = (q · c_j) × (scale × k_scale)   FP8 cache: c_j are the codes' exact values and the
//                                           scales are applied once to the dot product (the
//                                           CPU applies k_scale to each element first: the same
//                                           exact quantity, rounded differently);
//         (q · k_j) × scale                BF16 / F32 cache.
//   out = (Σ_j w_j · c_j) × v_scale / Σ_j w_j,  w_j = exp(s_j − m), m a running maximum
//   (expf: ≤ 2 ulp). Output rounded once to BF16 (nearest-even).
// Orders of summation differ from the CPU's (which sums in position order); the results are
// deterministic (no atomics; a fixed split of the work for given host bounds and head_dim):
//   * Decode kernel (SIMT, float32 FMAs): each lane sums its 8 elements of a dot product, then
//     a butterfly over the lanes of its thread group; softmax over a partition of 512 positions
//     (max, then Σ exp in a warp tree); Σ w·v per lane in key order, then a shuffle tree over
//     groups and a fixed-order sum over the 4 warps. Partitions of one row are merged by a
//     log-sum-exp reduce kernel: M = max m_i, out = Σ o_i·e^(m_i−M) / Σ l_i·e^(m_i−M), in
//     partition order. Rows processed whole (see below) rescale a running (m, l, o) per
//     partition instead.
//   * Prefill kernel (tensor cores, head_dim 64 / 128 with a BF16 or FP8 cache): mma.sync
//     m16n8k16 BF16 → float32. Q·Kᵀ: Q is BF16, K is BF16 or the FP8 codes expanded to BF16
//     (exact), so every product is exact; the tensor cores' float32 accumulation truncates
//     instead of rounding (≤ 2 ulp per 16-product step, within the float32 loop's bound — as
//     fp8_gemv.h). P = exp(s − m) is rounded to BF16 (relative error ≤ 2^-8) to feed the P·V
//     MMA, and the normalizer Σ w sums those same rounded values, so the rounding acts as a
//     relative perturbation of each weight (out − exact = Σ p_j δ_j (v_j − out)), not a bias.
//     Online softmax per 64-key tile (FlashAttention-2 style): each tile rescales the running
//     sums by e^(m_old − m_new).
// Tolerance against the CPU (tests/cuda/test_cuda_attention.cpp derives it): with u = 2^-24,
// a_j = |scale|·Σ_i |q_i k_ji| over the cached (dequantized) K, p_j the exact softmax weights, o
// the exact output over the cached K/V, R the number of rescalings (≤ key tiles spanned), each
// weight carries a relative error
//   e_j ≤ (head_dim + 3)·u·a_j + 2u·(m − s_j) + (2 + 3R)·u  [+ 2^-8 on the tensor-core path]
// (the + 1 in head_dim + 3: FP8 scales applied after the sum, not to each cached float32 value)
// and |out_gpu(before BF16) − o| ≤ Σ_j p_j e_j (|v_j| + |o|) + (L + R + 5)·u·(Σ_j p_j|v_j| + |o|),
// then half a BF16 ulp for the output rounding; the CPU's own float32 bound is added on top.
// The 2^-8 term (BF16's unit roundoff) dominates on the tensor-core path: the price of the
// BF16 P·V MMA; it multiplies Σ_j p_j |v_j − o|, which stays small when V is not skewed.
//
// ---- Which kernel computes which row (every row exactly once) ------------------------------
//   * Rows of sequences with ≤ kDecodeMaxNewTokens new tokens: the decode kernel, one CTA per
//     (row, kv head, kDecodePartition-position partition), all GQA query heads of the kv head in one CTA
//     (in chunks of 8 when the group is larger); partitions outside [lo, p] exit at once, so
//     grids sized from max_context cost little; the reduce kernel merges rows with > 1
//     partition (workspace: partials). Except in a step without prefill rows (max_new_tokens ≤
//     kDecodeMaxNewTokens) with num_seqs × num_kv_heads ≥ 2 × the SMs and a tensor-core head_dim: every
//     row takes the tensor-core kernel in its key-split form: one CTA per (sequence, kv head,
//     16 packed rows) streaming the whole context, each warp a quarter of every key tile with its
//     own online softmax, merged in shared memory (the split kernel's one-partition CTAs are
//     latency-bound at that size).
//   * Rows of longer sequences: the tensor-core prefill kernel (64 packed (token, query head)
//     rows × 64-key tiles, causal, GQA, keys gathered from the paged cache, cp.async double
//     buffering) when paged_attention_prefill_uses_mma(head_dim, element); otherwise (other
//     head_dims, F32 caches) the decode kernel run over the whole context per row: a simple,
//     correct SIMT path (slower: each row re-reads its keys from L2).
// The kernels read every length from the device arrays; the host only sizes grids from
// num_rows, num_seqs, max_new_tokens and max_context, so a captured CUDA graph replays
// correctly for any metadata within those bounds. Metadata that break the bounds (a sequence
// with more than max_new_tokens new tokens or a longer context than max_context) leave rows
// uncomputed; they are not checked on the device.
//
// Non-finite K/V in the cache (only from non-finite inputs) propagate on the SIMT paths; on the
// tensor-core path a NaN/inf value poisons its whole tile, as any MMA does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/paged_kv_types.h"

namespace fp8lm::cuda {

// One layer of the device KV cache: K and V arrays, each [num_blocks][num_kv_heads][block_size]
// [head_dim] (the CPU cache's layout), elements per `element`: kF32 float, kBF16 bf16,
// kE4M3/kE5M2 one-byte codes. Both 16-byte aligned. Scales: dequantization multipliers, FP8 only.
struct DeviceKvLayer {
  void* k = nullptr;
  void* v = nullptr;
  backend::KvElement element = backend::KvElement::kBF16;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// A batch's attention metadata; every pointer is DEVICE memory prepared by the caller once per
// forward step (the same buffers are re-used by CUDA-graph replays, so kernels read lengths from
// these arrays, never bake them in, except the host-side bounds below).
struct DeviceAttentionBatch {
  int num_seqs = 0;
  int64_t num_rows = 0;                         // rows of q/k/v/out = total new tokens
  const int32_t* row_seq = nullptr;             // [num_rows] sequence index of each row
  const int32_t* row_position = nullptr;        // [num_rows] absolute position of each row
  const int32_t* seq_first_row = nullptr;       // [num_seqs]
  const int32_t* seq_num_tokens = nullptr;      // [num_seqs] new tokens (≥ 1)
  const int32_t* seq_start_position = nullptr;  // [num_seqs] tokens already cached
  const int32_t* block_tables = nullptr;        // [num_seqs, max_blocks_per_seq], row-major
  int max_blocks_per_seq = 0;                   // ≥ cdiv(max_context, block_size)
  // Host-side upper bounds used to size grids (valid for every replay of a captured graph):
  int max_new_tokens = 0;  // ≥ every seq_num_tokens
  int max_context = 0;     // ≥ every seq_start_position + seq_num_tokens
  // ≥ the new tokens of every sequence with at most kDecodeMaxNewTokens (the decode rows'
  // sequences); 0: there are none; −1: not known (taken as min(max_new_tokens,
  // kDecodeMaxNewTokens)). In a step that mixes prefills and decodes it sizes the decode
  // kernels' grids by the decodes alone (and lets one-token decodes take the pair kernel).
  int max_decode_new_tokens = -1;
};

// Rows of sequences with at most this many new tokens take the decode kernel.
inline constexpr int kDecodeMaxNewTokens = 8;
// Positions per decode partition (one CTA each; partials merged by the reduce kernel).
// Small, so that a single decode row at a 1k context still spreads over the GPU
// (8 KV heads × 17 partitions ≈ 136 CTAs): the per-CTA key loop is latency
// bound, and with 512-position partitions one Llama-3.1-8B layer took 68 µs at
// batch 1 (FP8LM_CUDA_PROFILE on the H200).
inline constexpr int kDecodePartition = 64;

// Whether rows of sequences with > kDecodeMaxNewTokens new tokens take the tensor-core prefill
// kernel (head_dim 64 or 128, BF16 or FP8 cache) rather than the SIMT path.
bool paged_attention_prefill_uses_mma(int64_t head_dim, backend::KvElement element);

// Whether the decode rows of this batch (sequences of ≤ kDecodeMaxNewTokens new tokens) take the
// tensor-core decode kernel: num_seqs × num_kv_heads ≥ 64 (the context split over more CTAs
// where that is under 4 × the SMs; FP8LM_CUDA_DECODE_SPLIT=0: ≥ 2 × the current device's SMs),
// with paged_attention_prefill_uses_mma(head_dim, element).
bool paged_attention_decode_uses_mma(const DeviceAttentionBatch& batch, const backend::AttentionParams& params,
                                     backend::KvElement element);

// Which kernel takes the tensor-core decode rows of an FP8 cache whose decoding sequences' rows fit
// 8 (one token × a GQA group of ≤ 8): kMeasured, the warp-per-pair kernel from 12 (sequence, KV
// head) pairs an SM and the key-split CTAs below (the engine's choice, from measurements); kPairs,
// the pair kernel at any batch; kKeySplit, the key-split CTAs at any batch. The last two let the
// tests and bench_cuda_attention run either kernel on any problem; other decode rows are not
// affected.
enum class DecodeKernelChoice { kMeasured, kPairs, kKeySplit };

// Whether those tensor-core decode rows take the warp-per-pair kernel under `choice`.
bool paged_attention_decode_uses_pairs(const DeviceAttentionBatch& batch, const backend::AttentionParams& params,
                                       backend::KvElement element,
                                       DecodeKernelChoice choice = DecodeKernelChoice::kMeasured);

// Writes each row's K and V (rows × num_kv_heads·head_dim, BF16, 16-byte aligned) into the cache
// at its position (block = block_tables[seq][pos / block_size], slot = pos % block_size), rounded
// as the CPU cache does (see above). Uses num_rows, row_seq, row_position, block_tables and
// max_blocks_per_seq of `batch`; rows whose position falls outside the block table row
// (pos < 0 or pos ≥ max_blocks_per_seq·block_size) are skipped. Throws fp8lm::Error naming a
// bad argument before launching anything.
void store_kv(const __nv_bfloat16* k, const __nv_bfloat16* v, const DeviceAttentionBatch& batch, int num_kv_heads,
              int64_t head_dim, int block_size, const DeviceKvLayer& layer, cudaStream_t stream);

// Workspace paged_attention needs (bytes; 0 when no row can span more than one partition):
// partial outputs, maxima and sums of the decode rows, num_seqs·min(max_new_tokens, kDecodeMaxNewTokens)
// slots × num_heads × cdiv(max_context, kDecodePartition) partitions × (head_dim + 2) floats — but never more than
// kAttentionWorkspaceCap: a larger batch runs its sequences in groups that fit (one sequence
// at least, which alone can exceed the cap only at contexts beyond a million positions).
inline constexpr size_t kAttentionWorkspaceCap = size_t(256) << 20;
size_t paged_attention_workspace_bytes(const DeviceAttentionBatch& batch, const backend::AttentionParams& p);

// Counters that let the decode kernels merge a row's partitions itself: the last CTA of a
// (decode slot, KV head) of the SIMT kernel, or of a (sequence, row tile, KV head) of the
// tensor-core decode kernel's context chunks, to finish merges them (one kernel instead of the
// kernel + the merge kernel; the same arithmetic in the same order, so the same bytes). Device
// memory of kAttentionMergeCounters unsigned ints, zero-filled once when allocated: every call
// leaves the counters it used at zero again. A batch with more of those than that, or a call
// without counters, merges with the separate kernel.
inline constexpr int64_t kAttentionMergeCounters = 4096;

// out[row, head·head_dim …] = softmax(q·Kᵀ·scale over the cached positions the row may see) · V,
// BF16 out ([num_rows, num_heads·head_dim], like q; both 16-byte aligned), float32 inside.
// Causal by position; GQA (num_heads / num_kv_heads query heads per kv head); sliding window as
// the CPU. Reads the cache only (call store_kv first). head_dim: a multiple of 8 in [8, 256].
// `workspace`: at least paged_attention_workspace_bytes(batch, p) bytes, 16-byte aligned, no
// initialization needed (may be null when that is 0); calls on one stream may share it.
// `merge_counters`: null or kAttentionMergeCounters zeroed counters (above); calls on one
// stream may share them.
// When the decode grid is one wave (≤ 2 CTAs per SM), it brings the K/V of positions before
// each sequence's seq_start_position into L2 before it waits for the kernel before it (a
// programmatic dependent launch): those positions were stored by earlier steps, only the new
// rows' by the kernel before.
// `decode_kernel`: which kernel takes FP8 decode rows that fit the pair kernel (above; the
// engine passes kMeasured).
// Throws fp8lm::Error naming a bad argument before launching anything.
void paged_attention(const __nv_bfloat16* q, __nv_bfloat16* out, const DeviceAttentionBatch& batch,
                     const backend::AttentionParams& p, int block_size, const DeviceKvLayer& layer, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream, unsigned* merge_counters = nullptr,
                     DecodeKernelChoice decode_kernel = DecodeKernelChoice::kMeasured);

}  // namespace fp8lm::cuda
