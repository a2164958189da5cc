#include "spec/model_tensors.h"

#include <utility>

namespace fp8lm {
namespace {

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

void add_attention(const ModelConfig& c, int layer, const LayerTensorNames& n, std::vector<LinearModule>& out) {
  const int64_t q = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_key_value_heads} * c.head_dim;
  out.push_back({n.q_proj, q, c.hidden_size, layer, -1, LinearKind::kAttention, c.qkv_bias});
  out.push_back({n.k_proj, kv, c.hidden_size, layer, -1, LinearKind::kAttention, c.qkv_bias});
  out.push_back({n.v_proj, kv, c.hidden_size, layer, -1, LinearKind::kAttention, c.qkv_bias});
  out.push_back({n.o_proj, c.hidden_size, q, layer, -1, LinearKind::kAttention, c.o_bias});
}

void add_dense_mlp(const ModelConfig& c, int layer, const LayerTensorNames& n, std::vector<LinearModule>& out) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  out.push_back({n.gate_proj, i, h, layer, -1, LinearKind::kMlp, c.mlp_bias});
  out.push_back({n.up_proj, i, h, layer, -1, LinearKind::kMlp, c.mlp_bias});
  out.push_back({n.down_proj, h, i, layer, -1, LinearKind::kMlp, c.mlp_bias});
}

void add_moe(const ModelConfig& c, int layer, std::vector<LinearModule>& out) {
  const int64_t h = c.hidden_size, i = c.moe.moe_intermediate_size;
  MoeTensorNames n = moe_tensor_names(c, layer);
  out.push_back({std::move(n.router), c.moe.num_experts, h, layer, -1, LinearKind::kRouter, false});
  for (int e = 0; e < c.moe.num_experts; ++e) {
    ExpertTensorNames& x = n.experts[size_t(e)];
    // Checkpoint order (Mixtral's w1, w2, w3).
    out.push_back({std::move(x.gate_proj), i, h, layer, e, LinearKind::kExpert, false});
    out.push_back({std::move(x.down_proj), h, i, layer, e, LinearKind::kExpert, false});
    out.push_back({std::move(x.up_proj), i, h, layer, e, LinearKind::kExpert, false});
  }
}

}  // namespace

LayerTensorNames layer_tensor_names(int layer) {
  const std::string p = layer_prefix(layer);
  return {p + "input_layernorm.weight",  p + "post_attention_layernorm.weight",
          p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight",
          p + "self_attn.q_proj",        p + "self_attn.k_proj",
          p + "self_attn.v_proj",        p + "self_attn.o_proj",
          p + "mlp.gate_proj",           p + "mlp.up_proj",
          p + "mlp.down_proj"};
}

MoeTensorNames moe_tensor_names(const ModelConfig& c, int layer) {
  const bool mixtral = c.mixtral_naming();
  const std::string p = layer_prefix(layer) + (mixtral ? "block_sparse_moe." : "mlp.");
  MoeTensorNames n{p + "gate", {}};
  n.experts.reserve(size_t(c.moe.num_experts));
  for (int e = 0; e < c.moe.num_experts; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    n.experts.push_back(mixtral ? ExpertTensorNames{ep + "w1", ep + "w3", ep + "w2"}
                                : ExpertTensorNames{ep + "gate_proj", ep + "up_proj", ep + "down_proj"});
  }
  return n;
}

int64_t count_linear_modules(const ModelConfig& c) {
  int64_t n = c.tie_word_embeddings ? 0 : 1;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    n += 4 + (c.is_moe_layer(l) ? 1 + 3 * int64_t{c.moe.num_experts} : 3);
  return n;
}

std::vector<LinearModule> linear_modules(const ModelConfig& c) {
  std::vector<LinearModule> out;
  out.reserve(static_cast<size_t>(count_linear_modules(c)));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerTensorNames names = layer_tensor_names(l);
    add_attention(c, l, names, out);
    if (c.is_moe_layer(l)) add_moe(c, l, out);
    else add_dense_mlp(c, l, names, out);
  }
  if (!c.tie_word_embeddings)
    out.push_back({std::string(kLmHead), c.vocab_size, c.hidden_size, -1, -1, LinearKind::kLmHead, false});
  return out;
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  out.push_back({std::string(kEmbedTokensWeight), {c.vocab_size, c.hidden_size}, TensorRole::kEmbedding});
  std::vector<LinearModule> linears = linear_modules(c);
  int current_layer = -1;
  for (const LinearModule& m : linears) {
    if (m.layer != current_layer && m.layer >= 0) {
      current_layer = m.layer;
      LayerTensorNames n = layer_tensor_names(m.layer);
      out.push_back({std::move(n.input_norm), {c.hidden_size}, TensorRole::kNorm});
      out.push_back({std::move(n.post_attention_norm), {c.hidden_size}, TensorRole::kNorm});
      if (c.qk_norm) {
        out.push_back({std::move(n.q_norm), {c.head_dim}, TensorRole::kNorm});
        out.push_back({std::move(n.k_norm), {c.head_dim}, TensorRole::kNorm});
      }
    }
    out.push_back({m.name + ".weight", {m.out_features, m.in_features}, TensorRole::kLinearWeight});
    if (m.has_bias) out.push_back({m.name + ".bias", {m.out_features}, TensorRole::kBias});
  }
  out.push_back({std::string(kFinalNormWeight), {c.hidden_size}, TensorRole::kNorm});
  return out;
}

}  // namespace fp8lm
