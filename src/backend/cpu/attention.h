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

void paged_attention(const float* q, const float* k, const float* v, float* out,
                     std::span<const AttentionSequence> sequences, const AttentionParams& params,
                     PagedKvCache& cache, int layer, ThreadPool* pool = nullptr);

}  // namespace fp8lm::cpu
