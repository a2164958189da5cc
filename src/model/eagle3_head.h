// An EAGLE-3 draft head's forward over the backend ops (issue 42; spec/eagle3_head.h says what the
// head computes). One step runs rows of sequences in the head's own paged KV cache (one layer),
// each row a token with the state it fuses: the target's auxiliary hidden states (a chain's first
// step over real context) or the head's own hidden state of the step before (each next drafted
// token). A row whose cache slot is s sits at RoPE position s + 1: the head's row for target
// position p pairs the token at p with the target's states at p − 1 (EAGLE's shift by one), so
// slot s holds position s + 1, as speculators trains it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "loader/eagle3_weights.h"
#include "model/llama_model.h"
#include "spec/eagle3_head.h"
#include "spec/rope.h"

namespace fp8lm::model {

class Eagle3Head {
 public:
  // Uploads `weights` to `ops`' backend (`ops` must outlive the head). `target_embedding`: the
  // target's uploaded table on the same backend (LlamaModel::embedding), used when the head has
  // none of its own (the EAGLE release layout); the caller checks that its vocabulary and width
  // are the head's, and keeps it alive.
  Eagle3Head(const Eagle3HeadConfig& config, const loader::Eagle3HostWeights& weights, backend::Ops& ops,
             const backend::Weight* target_embedding = nullptr);

  const Eagle3HeadConfig& config() const { return config_; }
  backend::KvCacheShape kv_cache_shape(int block_size, int64_t num_blocks) const;
  int64_t draft_to_target(int64_t draft_id) const { return draft_to_target_[size_t(draft_id)]; }

  // One step. `input`: the auxiliary states, one [rows, target H] tensor per auxiliary layer (a
  // chain's first step: from_aux), or one [rows, H] tensor, the hidden states of the head's previous step;
  // `batch`: the rows' tokens, their sequences' cache slots (start_position) and block tables in
  // the head's cache. The caller owns the backend's scratch (the step allocates from it and never
  // resets it, so the inputs may live there). `out_rows`: the rows (indices into the step's rows)
  // whose results are wanted, in that order; empty: every row. Returns their draft-vocabulary
  // logits and the hidden state each hands to its next step.
  struct Output {
    backend::Tensor logits;  // [out rows, draft vocab]
    backend::Tensor hidden;  // [out rows, H]
  };
  Output step(std::span<const SequenceInput> batch, std::span<const backend::Tensor> input, bool from_aux,
              backend::KvCache& cache, std::span<const int64_t> out_rows = {});

 private:
  Eagle3HeadConfig config_;
  backend::Ops& ops_;
  RopeTable rope_;
  int q_heads_ = 0, kv_heads_ = 0;
  std::vector<int64_t> draft_to_target_;
  std::vector<std::unique_ptr<backend::Weight>> fc_, fc_norms_;  // per auxiliary state (fc_norms_: fc_norm)
  std::unique_ptr<backend::Weight> q_embed_, q_hidden_, k_embed_, k_hidden_, v_embed_, v_hidden_;
  std::unique_ptr<backend::Weight> o_, gate_, up_, down_, lm_head_, own_embedding_;
  const backend::Weight* embedding_ = nullptr;  // own_embedding_ or the target's
  std::unique_ptr<backend::Weight> input_norm_, hidden_norm_, post_norm_, final_norm_;
};

}  // namespace fp8lm::model
