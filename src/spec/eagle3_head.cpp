#include "spec/eagle3_head.h"

#include <string>
#include <vector>

namespace fp8lm {

std::vector<Eagle3Tensor> eagle3_tensors(const Eagle3HeadConfig& c, bool own_embedding) {
  const ModelConfig& l = c.layer;
  const int64_t h = l.hidden_size, hd = l.head_dim;
  const int64_t q = int64_t(l.num_attention_heads) * hd, kv = int64_t(l.num_key_value_heads) * hd;
  const int64_t aux = c.aux_layer_ids.empty() ? 3 : int64_t(c.aux_layer_ids.size());
  const std::string p = c.layout == Eagle3HeadConfig::Layout::kSpeculators ? "layers.0." : "midlayer.";
  using K = Eagle3Tensor::Kind;
  std::vector<Eagle3Tensor> t = {
      {"fc.weight", {h, aux * c.target_hidden_size}, K::kFloat},
      {p + "input_layernorm.weight", {h}, K::kFloat},
      {p + "hidden_norm.weight", {h}, K::kFloat},
      {p + "self_attn.q_proj.weight", {q, 2 * h}, K::kFloat},
      {p + "self_attn.k_proj.weight", {kv, 2 * h}, K::kFloat},
      {p + "self_attn.v_proj.weight", {kv, 2 * h}, K::kFloat},
      {p + "self_attn.o_proj.weight", {h, q}, K::kFloat},
      {p + "post_attention_layernorm.weight", {h}, K::kFloat},
      {p + "mlp.gate_proj.weight", {l.intermediate_size, h}, K::kFloat},
      {p + "mlp.up_proj.weight", {l.intermediate_size, h}, K::kFloat},
      {p + "mlp.down_proj.weight", {h, l.intermediate_size}, K::kFloat},
      {"norm.weight", {h}, K::kFloat},
      {"lm_head.weight", {c.draft_vocab_size, h}, K::kFloat},
  };
  if (c.draft_vocab_size != l.vocab_size) {
    t.push_back({"d2t", {c.draft_vocab_size}, K::kI64});
    t.push_back({"t2d", {l.vocab_size}, K::kBool});
  }
  if (c.fc_norm)
    for (int64_t i = 0; i < aux; ++i) t.push_back({"fc_norm." + std::to_string(i) + ".weight", {c.target_hidden_size}, K::kFloat});
  if (own_embedding) t.push_back({"embed_tokens.weight", {l.vocab_size, h}, K::kFloat});
  return t;
}

std::vector<int> eagle3_default_aux_layers(int layers) { return {2, layers / 2, layers - 3}; }

}  // namespace fp8lm
