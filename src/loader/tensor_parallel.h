// Tensor parallelism's split of a model (issue 22): which heads, MLP rows and vocabulary rows
// rank r of `size` holds (plan_tensor_parallel), and that rank's host weights cut from the whole
// model's (shard_host_weights) — the split logic, apart from any device or transport, so that it
// is tested on the CPU.
//
// As vLLM splits a Llama-family model: q/k/v and gate/up column-parallel (each rank a contiguous
// range of heads or MLP rows), o_proj and down_proj row-parallel (the same range of their K; the
// partial sums are all-reduced, the bias added by rank 0 only), the KV cache by KV head (when
// the ranks outnumber the KV heads, each KV head is held by size / kv_heads ranks: replicated),
// the embedding and lm_head by vocabulary rows, norms and the MoE router whole on every rank,
// each expert split like the dense MLP. Sizes that do not divide are refused by name, except
// FP8 cells: a per-rank size that is not a multiple of a 128 × 128 block (or 1 × 128 group) is
// split anyway, the cells it cuts re-scaled (weights/shard_weight.h), and what that changed is
// reported.
#pragma once

#include <cstdint>

#include "loader/host_model.h"
#include "spec/model_config.h"
#include "weights/shard_weight.h"

namespace fp8lm::loader {

struct TensorParallelPlan {
  int rank = 0, size = 1;
  int64_t q_head0 = 0, q_heads = 0;    // query heads [q_head0, q_head0 + q_heads)
  int64_t kv_head0 = 0, kv_heads = 0;  // KV heads (1 each where replicated)
  int64_t vocab0 = 0, vocab = 0;       // embedding / lm_head rows [vocab0, vocab0 + vocab)
  bool kv_replicated = false;          // more ranks than KV heads
};

// Throws fp8lm::Error naming the config value a split does not divide (or a bad rank / size).
TensorParallelPlan plan_tensor_parallel(const ModelConfig& c, int rank, int size);

// [first, first + count) of `total` for rank r of `size` (total % size == 0, else an Error that
// names `what`).
struct Range {
  int64_t first = 0, count = 0;
};
Range even_split(int64_t total, int rank, int size, const char* what);

// Rank p.rank's weights: every linear cut as the plan says, the rest copied. The MLP (and each
// expert's) rows split evenly, refused by name where they do not divide. `report` collects what
// re-scaling cut FP8 cells changed.
HostModelWeights shard_host_weights(const HostModelWeights& w, const ModelConfig& c, const TensorParallelPlan& p,
                                    weights::ShardReport* report = nullptr);

}  // namespace fp8lm::loader
