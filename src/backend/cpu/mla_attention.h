// The CPU backend's multi-head latent attention (DeepSeek-V3; backend/ops.h
// MlaParams, Ops::mla_attention) over a latent cache (backend/cpu/kv_cache.h
// with KvCacheShape::latent): one entry a token, the latent c (latent_dim)
// then the roped key part k_pe (rope_dim), shared by every query head.
//
// Per head h, with W_UK_h [nope, latent] and W_UV_h [v, latent] the head's rows
// of kv_b_proj, a token at position p attends positions j ∈ [0, p]:
//   absorbed:      q_lat = W_UK_hᵀ q_nope;  s_j = (q_lat · c_j + q_pe · k_pe_j) × scale
//                  o_lat = Σ_j w_j c_j / Σ_j w_j;  out_h = W_UV_h o_lat
//   decompressed:  k_j = W_UK_h c_j;  v_j = W_UV_h c_j;  s_j = (q_nope · k_j + q_pe · k_pe_j) × scale
//                  out_h = Σ_j w_j v_j / Σ_j w_j
// with w_j = exp(s_j − max s) — the same numbers in another association, equal
// to float32 rounding (tests/cpp/test_mla.cpp checks it). Like paged_attention,
// every new entry is stored first and every score reads the *cached* (rounded)
// entries, in a fixed float32 order that depends only on the row's own query,
// its position and the cache: a row's output is the same alone or batched, in
// one prefill or token by token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/kv_cache.h"
#include "backend/ops.h"
#include "common/thread_pool.h"
#include "weights/linear_weight.h"

namespace fp8lm::cpu {

// kv_b_proj split into each head's up-projections, dequantized to float32.
struct MlaUpProjections {
  int heads = 0;
  int64_t nope = 0, v = 0, latent = 0;
  std::vector<float> w_uk;  // [heads][nope][latent]
  std::vector<float> w_uv;  // [heads][v][latent]
};

// Throws fp8lm::Error when kv_b is not [heads · (nope + v), latent] or its element type cannot be read.
MlaUpProjections make_mla_up_projections(const weights::LinearWeight& kv_b, int heads, int64_t nope, int64_t v);

// Rotates the rope part of each head of q (the last rope.rotary_dim() of each nope + rope) and
// k_pe (one rope part a row) by positions[r]; `interleaved` as Ops::rope_mla says.
void rope_mla(float* q, int64_t q_cols, float* k_pe, int64_t rows, int64_t nope, std::span<const int64_t> positions,
              const RopeTable& rope, bool interleaved);

// Ops::mla_attention: q [rows, heads · (nope + rope)], latent [rows, latent_dim], k_pe
// [rows, rope_dim] → out [rows, heads · v_dim], sequences as for paged_attention.
void mla_attention(const float* q, const float* latent, const float* k_pe, const MlaUpProjections& up, float* out,
                   std::span<const backend::AttentionSequence> sequences, const backend::MlaParams& params,
                   PagedKvCache& cache, int layer, ThreadPool* pool = nullptr);

}  // namespace fp8lm::cpu
