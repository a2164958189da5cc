// The CPU backend's attention over the paged KV cache (backend/cpu/kv_cache.h),
// for a batch mixing prefill chunks and decodes.
//
// paged_attention first stores every new token's K and V into the cache, then
// computes each new token's causal softmax attention over the *cached*
// (rounded, dequantized) K/V — its own position included — so a token's
// output is the same whether it was prefilled in one step, in chunks, token by
// token, alone or batched, or later served from a prefix cache.
//
// Numerics, all float32 in a fixed order that depends only on the token's own
// query row, its position and the cache contents (so results are bit-identical
// for any thread count and any split of a sequence into steps):
//   s_j  = dot(q, k_j) × scale   (8 fixed partial sums over head_dim, then added pairwise)
//   m    = max_j s_j;  w_j = exp(s_j − m);  S = Σ_j w_j  (positions in increasing order)
//   out  = (Σ_j w_j · v_j) / S   (positions in increasing order, each product rounded,
//                                 no fused multiply-add: -ffp-contract=off)
// Positions attended by the token at position p: j ∈ [lo, p], lo = 0, or with a
// sliding window W, lo = max(0, p − W + 1) (Hugging Face's `kv_idx > q_idx − W`:
// the token itself and the W − 1 before it).
//
// Work is split into (new token, kv head) tasks; a task computes all the query
// heads that share its kv head (GQA) from one dequantization of each K/V block.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "backend/cpu/kv_cache.h"
#include "common/thread_pool.h"

namespace fp8lm::cpu {

using backend::AttentionSequence;
using backend::AttentionParams;

// Throws fp8lm::Error (prefixed with `who`) for sequences the cache cannot take: no tokens, rows
// or positions out of range, short block tables or blocks outside the cache, two sequences on
// one row, two new tokens on one cache slot. paged_attention and the MLA attention both check so.
void check_attention_sequences(std::span<const AttentionSequence> sequences, const KvCacheShape& shape,
                               const char* who);

// The float32 sums every CPU attention uses (fixed order, so results do not depend on threads):
// attention_dot = Σ a_i b_i with 8 partial sums (lane l takes i ≡ l mod 8) added pairwise;
// attention_axpy: y += a · x, each product rounded, then the sum (no fused multiply-add).
float attention_dot(const float* __restrict a, const float* __restrict b, int64_t n);
void attention_axpy(float* __restrict y, const float* __restrict x, float a, int64_t n);

// fp8 (Ops::set_fp8_attention, on a layer whose cache is E4M3): FlashAttention-3's FP8 attention,
// the numerics issue 44's study emulated (tools/fp8_attention_error.py, `fp8_head` with one scale a
// query row and head): each (row, head)'s q quantized to E4M3 under its own dynamic scale (numerics'
// runtime rule: amax / 448, floored; q / scale rounded to nearest even, saturated), the scores from those
// values and the cached K as stored; the weights w_j = exp(s_j − m) summed unrounded into S, then
// each rounded to an E4M3 code of w_j · 2^8 (the power of two keeps small weights out of E4M3's
// subnormals) before Σ_j w_j · v_j; out = (Σ / 2^8) / S. Float32 sums in the same fixed orders.
void paged_attention(const float* q, const float* k, const float* v, float* out,
                     std::span<const AttentionSequence> sequences, const AttentionParams& params,
                     PagedKvCache& cache, int layer, ThreadPool* pool = nullptr, bool fp8 = false);

}  // namespace fp8lm::cpu
