// The weight bytes one decode step reads: the roofline's numerator. One rule for the engine
// (engine::Runtime::decode_weight_bytes, which bench latency prints) and the report
// (cli/bench_report), which draws it from saved numbers alone.
//  - An MoE model's experts: per sparse layer the experts the step routes to — top_k at batch 1,
//    and E·(1 − (1 − top_k/E)^batch) distinct experts expected at a larger batch under uniform
//    routing (what random dummy weights give).
//  - The embedding table: the rows of the step's tokens (one a sequence), not the whole resident
//    table — except where lm_head is the same table, which reads all of it every step.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>

namespace fp8lm {

inline double moe_decode_weight_bytes(double weight_bytes, double expert_bytes, double experts, double top_k,
                                      double batch) {
  const double touched = experts * (1.0 - std::pow(1.0 - top_k / experts, std::max(batch, 1.0)));
  return weight_bytes - expert_bytes + expert_bytes * touched / experts;
}

// The resident embedding table: its bytes, its rows (the vocabulary) and whether lm_head is it.
struct EmbeddingTable {
  double bytes = 0, rows = 0;
  bool tied = false;
};

// `weight_bytes` (every resident weight, the table once) with the table counted as a step of
// `batch` sequences reads it: `batch` rows (at most all of them), or the whole table where tied.
inline double embedding_decode_weight_bytes(double weight_bytes, const EmbeddingTable& e, double batch) {
  if (e.tied || e.rows <= 0) return weight_bytes;
  return weight_bytes - e.bytes + e.bytes * std::min(std::max(batch, 1.0), e.rows) / e.rows;
}

// An MoE model's experts: how many, how many a token is routed to, their resident bytes.
struct RoutedExperts {
  double experts = 0, top_k = 0, expert_bytes = 0;
};

// The whole rule: `weight_bytes` (every resident weight) as a step of `batch` sequences reads
// them — the embedding table by the rows of its tokens where it is known (without it, whole), an
// MoE model's experts by those routed to.
inline double decode_weight_bytes(double batch, double weight_bytes, const std::optional<RoutedExperts>& moe,
                                  const std::optional<EmbeddingTable>& embedding) {
  const double bytes = embedding ? embedding_decode_weight_bytes(weight_bytes, *embedding, batch) : weight_bytes;
  if (!moe) return bytes;
  return moe_decode_weight_bytes(bytes, moe->expert_bytes, moe->experts, moe->top_k, batch);
}

}  // namespace fp8lm
