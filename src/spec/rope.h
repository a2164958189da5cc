// Rotary position embeddings: the inverse frequencies and the cos/sin scale
// each RoPE variant implies, computed in float32 the way Hugging Face
// transformers does (modeling_rope_utils), so positions rotate identically.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/model_config.h"

namespace fp8lm {

class RopeTable {
 public:
  // Throws fp8lm::Error for a scaling fp8lm does not implement (dynamic NTK,
  // whose frequencies change with the length of the batch).
  explicit RopeTable(const ModelConfig& config);

  int64_t rotary_dim() const { return int64_t(inv_freq_.size()) * 2; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float attention_factor() const { return attention_factor_; }  // multiplies cos and sin (YaRN)

  // cos and sin of position · inv_freq[i] (times attention_factor), rotary_dim()/2 values each.
  void cos_sin(int64_t position, float* cos_out, float* sin_out) const;

 private:
  std::vector<float> inv_freq_;
  float attention_factor_ = 1.0f;
};

// Multi-head latent attention's softmax scale (transformers' DeepseekV3Attention.scaling):
// (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times mscale² with mscale = 0.1 · mscale_all_dim ·
// ln(factor) + 1 under a RoPE scaling that gives mscale_all_dim (YaRN; factor ≤ 1: mscale 1) —
// DeepSeek's correction for the entropy a stretched context adds to the softmax.
float mla_softmax_scale(const ModelConfig& config);

}  // namespace fp8lm
