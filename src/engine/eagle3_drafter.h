// The EAGLE-3 drafter of speculative decoding (issue 42; vLLM's {"method": "eagle3", "model": DIR,
// ...}): a head of one decoder layer (model/eagle3_head.h) drafts greedily from the target's own
// hidden states, which the target keeps for it (LlamaModel::capture_aux_states).
//
// It runs right after every target step, while the step's hidden states are still in the
// backend's scratch (Drafter::after_target_step): one head step over all the step's rows — row p
// pairs the target's states at p with the token at p + 1, which is known by then (a prompt's
// next token, a kept draft, the token just sampled); a verify step's rows past the first rejected
// draft get a stand-in token, and the next step writes their slots again — and, for each sequence
// that wants drafts, the logits of its last row give the first draft; k − 1 more head steps of one
// row a sequence, each fed the draft before and the head's own hidden state, give the rest. The
// drafts wait for the engine's next draft() call.
//
// The head's KV cache has the target cache's blocks (the same count and block size): a sequence's
// head slot p lives in the block of its target position p, so block tables, preemption and the
// prefix cache need no bookkeeping of their own (a prefix-cached block holds the head slots the
// sequence that filled it wrote — the same tokens and states, but for its last slot, which read
// the next block's first token: a draft there may be worse, never wrong). Spare blocks past the
// target's hold a chain's slots beyond a sequence's block table, for that chain only, and
// blocks past those the rows of a sequence whose blocks went back before the head saw its step.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/runtime.h"
#include "engine/speculative.h"
#include "model/eagle3_head.h"

namespace fp8lm::engine {

class Eagle3Drafter final : public Drafter {
 public:
  // Reads and checks the head at config.model (io::read_eagle3_checkpoint) against `target`: its
  // vocabulary, its hidden size, the layers it reads, one rank. Uploads it to the target's
  // backend, has the target keep those layers' hidden states from now on, and makes the head's
  // cache for steps of up to `max_num_seqs` sequences and `max_batched_tokens` rows (the engine's
  // scheduler limits). fp8lm::Error naming what is wrong. `target` must outlive the drafter.
  static std::unique_ptr<Eagle3Drafter> load(const SpeculativeConfig& config, Runtime& target, int64_t max_num_seqs,
                                             int64_t max_batched_tokens);
  // The bytes a token takes in the head's cache (RuntimeOptions::kv_companion_bytes_per_token),
  // read from the head at config.model before the target loads; fp8lm::Error as load() words it.
  static uint64_t kv_bytes_per_token(const SpeculativeConfig& config);
  Eagle3Drafter(const io::Eagle3Checkpoint& checkpoint, const loader::Eagle3HostWeights& weights, Runtime& target,
                int64_t max_num_seqs, int64_t max_batched_tokens);

  void draft(std::span<Request> requests) override;
  void keep(uint64_t, int64_t) override {}  // the next target step writes the slots past what was kept
  void release(uint64_t id) override { drafts_.erase(id); }
  bool reads_target_states() const override { return true; }
  void after_target_step(std::span<const StepRows> rows) override;

  const model::Eagle3Head& head() const { return *head_; }

 private:
  struct Drafts {
    size_t length = 0;  // the sequence's tokens when they were drafted
    std::vector<int32_t> tokens;
  };
  Runtime& target_;
  std::unique_ptr<model::Eagle3Head> head_;
  std::unique_ptr<backend::KvCache> cache_;
  int64_t target_blocks_ = 0, spare_blocks_ = 0, unread_blocks_ = 0;
  std::unordered_map<uint64_t, Drafts> drafts_;
};

}  // namespace fp8lm::engine
