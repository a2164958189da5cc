// The weight bytes one decode step of an MoE model reads: the dense weights, and per sparse
// layer the experts the step routes to — top_k at batch 1, and E·(1 − (1 − top_k/E)^batch)
// distinct experts expected at a larger batch under uniform routing (what random dummy weights
// give). One rule for the engine's roofline (engine::Runtime::decode_weight_bytes) and the
// report's (cli/bench_report), which draws it from saved numbers alone.
#pragma once

#include <algorithm>
#include <cmath>

namespace fp8lm {

inline double moe_decode_weight_bytes(double weight_bytes, double expert_bytes, double experts, double top_k,
                                      double batch) {
  const double touched = experts * (1.0 - std::pow(1.0 - top_k / experts, std::max(batch, 1.0)));
  return weight_bytes - expert_bytes + expert_bytes * touched / experts;
}

}  // namespace fp8lm
