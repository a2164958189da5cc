// An EAGLE-3 head's weights on the host (spec/eagle3_head.h), from a checkpoint that
// io::read_eagle3_checkpoint has checked: float32 matrices and vectors (a head is one layer; its
// largest matrix, lm_head over the draft vocabulary, is what a backend may quantize later), the
// q/k/v projections split by input columns into the half that reads the normed token embedding
// and the half that reads the normed fused state, and fc into one block per auxiliary state — the
// same products as one projection of the concatenation, without building the concatenated rows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "io/eagle3_config_json.h"
#include "weights/linear_weight.h"

namespace fp8lm::loader {

struct Eagle3HostWeights {
  std::vector<weights::LinearWeight> fc;     // fc's column blocks [H, target H], one per auxiliary state
  // q, k and v: the columns that read the normed embedding, and those that read the normed state.
  weights::LinearWeight q_embed, q_hidden, k_embed, k_hidden, v_embed, v_hidden;
  weights::LinearWeight o, gate, up, down;
  weights::LinearWeight lm_head;             // [draft vocab, H]
  std::optional<weights::LinearWeight> embedding;  // the head's own table, else the target's
  std::vector<float> input_norm, hidden_norm, post_attention_norm, final_norm;
  std::vector<std::vector<float>> fc_norms;  // fc_norm: one per auxiliary state
  std::vector<int64_t> draft_to_target;      // draft id → target id (d + d2t[d]); identity without d2t
};

Eagle3HostWeights load_eagle3_host_weights(const std::filesystem::path& dir, const io::Eagle3Checkpoint& checkpoint);

}  // namespace fp8lm::loader
