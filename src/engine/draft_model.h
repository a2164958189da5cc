// The draft-model drafter of speculative decoding (issue 42; vLLM's {"model": DIR, ...}): a
// smaller model with the target's vocabulary, loaded as a Runtime of its own (any scheme fp8lm
// loads, "quantization" for online FP8), drafts k tokens a sequence greedily. Its drafts are
// deterministic, so the target's verification (engine/speculative.h) is exact for greedy and
// sampled requests alike.
//
// Each sequence keeps a KV cache of its own in the draft model's cache (block table,
// positions computed). A draft() call first brings every sequence's draft cache up to its
// tokens but the last (prompt chunks within the batch budget, as a prefill), then runs k decode
// steps of one token a sequence — the first feeds the last token, each next the draft before
// (graph-recorded on a GPU like any decode step). keep() moves a sequence's computed positions
// back to what it kept, so a verify step's rejected drafts are written over. A sequence whose
// blocks the draft cache cannot hold gets no draft that step (its cache is dropped, and rebuilt
// when there is room): the draft model never preempts the target.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/runtime.h"
#include "engine/speculative.h"

namespace fp8lm::engine {

class DraftModel final : public Drafter {
 public:
  // Loads config.model (with config.quantization) with `options` (device, threads, its KV
  // cache's size); fp8lm::Error naming what is wrong. Beyond the draft's context a sequence gets
  // fewer drafts, or none.
  static std::unique_ptr<DraftModel> load(const SpeculativeConfig& config, const RuntimeOptions& options);
  // Refuses (fp8lm::Error) a draft whose vocabulary is not the target's.
  void check_target(int64_t target_vocab) const;
  DraftModel(std::unique_ptr<Runtime> runtime, int64_t max_batched_tokens);
  ~DraftModel() override;

  void draft(std::span<Request> requests) override;
  void keep(uint64_t id, int64_t length) override;
  void release(uint64_t id) override;

  Runtime& runtime() { return *rt_; }

 private:
  struct State {
    std::vector<int64_t> blocks;
    int64_t computed = 0;  // positions whose K/V match the sequence's tokens
  };
  bool reserve(State& s, int64_t positions);  // false: the draft cache is full (nothing taken)
  void drop(State& s);

  std::unique_ptr<Runtime> rt_;
  int64_t max_batched_tokens_;
  std::unordered_map<uint64_t, State> states_;
};

}  // namespace fp8lm::engine
