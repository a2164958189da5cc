#include "spec/model_tensors.h"

#include <utility>

namespace fp8lm {
namespace {

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

void add_mla(const ModelConfig& c, int layer, const LayerTensorNames& n, std::vector<LinearModule>& out) {
  const MlaConfig& a = c.mla;
  MlaTensorNames m = mla_tensor_names(layer);
  const int64_t heads = c.num_attention_heads, h = c.hidden_size;
  if (a.q_lora_rank > 0) {
    out.push_back({std::move(m.q_a_proj), a.q_lora_rank, h, layer, -1, LinearKind::kAttention, false});
    out.push_back({std::move(m.q_b_proj), heads * a.qk_head_dim(), a.q_lora_rank, layer, -1, LinearKind::kAttention,
                   false});
  } else {
    out.push_back({std::move(m.q_proj), heads * a.qk_head_dim(), h, layer, -1, LinearKind::kAttention, false});
  }
  out.push_back({std::move(m.kv_a_proj), a.latent_width(), h, layer, -1, LinearKind::kAttention, false});
  out.push_back({std::move(m.kv_b_proj), heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, layer, -1,
                 LinearKind::kAttention, false});
  out.push_back({n.o_proj, h, heads * a.v_head_dim, layer, -1, LinearKind::kAttention, false});
}

void add_attention(const ModelConfig& c, int layer, const LayerTensorNames& n, std::vector<LinearModule>& out) {
  if (c.is_mla()) return add_mla(c, layer, n, out);
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
  if (c.moe.n_shared_experts > 0) {  // one dense SwiGLU MLP, after the routed experts on disk
    const int64_t s = c.moe.moe_intermediate_size * c.moe.n_shared_experts;
    out.push_back({std::move(n.shared.gate_proj), s, h, layer, -1, LinearKind::kMlp, false});
    out.push_back({std::move(n.shared.up_proj), s, h, layer, -1, LinearKind::kMlp, false});
    out.push_back({std::move(n.shared.down_proj), h, s, layer, -1, LinearKind::kMlp, false});
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

MlaTensorNames mla_tensor_names(int layer) {
  const std::string p = layer_prefix(layer) + "self_attn.";
  return {p + "q_proj",   p + "q_a_proj",  p + "q_a_layernorm.weight", p + "q_b_proj",
          p + "kv_a_proj_with_mqa", p + "kv_a_layernorm.weight", p + "kv_b_proj"};
}

std::vector<std::string> mtp_layer_prefixes(const ModelConfig& c) {
  std::vector<std::string> out;
  for (int i = 0; i < c.mla.num_nextn_predict_layers; ++i) out.push_back(layer_prefix(c.num_hidden_layers + i));
  return out;
}

MoeTensorNames moe_tensor_names(const ModelConfig& c, int layer) {
  const bool mixtral = c.mixtral_naming();
  const std::string p = layer_prefix(layer) + (mixtral ? "block_sparse_moe." : "mlp.");
  MoeTensorNames n{p + "gate", {}, "", {}};
  n.experts.reserve(size_t(c.moe.num_experts));
  for (int e = 0; e < c.moe.num_experts; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    n.experts.push_back(mixtral ? ExpertTensorNames{ep + "w1", ep + "w3", ep + "w2"}
                                : ExpertTensorNames{ep + "gate_proj", ep + "up_proj", ep + "down_proj"});
  }
  if (c.moe.correction_bias) n.router_bias = p + "gate.e_score_correction_bias";
  if (c.moe.n_shared_experts > 0)
    n.shared = {p + "shared_experts.gate_proj", p + "shared_experts.up_proj", p + "shared_experts.down_proj"};
  return n;
}

int64_t count_linear_modules(const ModelConfig& c) {
  int64_t n = c.tie_word_embeddings ? 0 : 1;
  const int64_t attention = c.is_mla() ? (c.mla.q_lora_rank > 0 ? 5 : 4) : 4;
  const int64_t shared = c.moe.n_shared_experts > 0 ? 3 : 0;
  for (int l = 0; l < c.num_hidden_layers; ++l)
    n += attention + (c.is_moe_layer(l) ? 1 + 3 * int64_t{c.moe.num_experts} + shared : 3);
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
      if (c.is_mla()) {
        MlaTensorNames a = mla_tensor_names(m.layer);
        if (c.mla.q_lora_rank > 0) out.push_back({std::move(a.q_a_norm), {c.mla.q_lora_rank}, TensorRole::kNorm});
        out.push_back({std::move(a.kv_a_norm), {c.mla.kv_lora_rank}, TensorRole::kNorm});
      }
      if (c.moe.correction_bias && c.is_moe_layer(m.layer))
        out.push_back({moe_tensor_names(c, m.layer).router_bias, {c.moe.num_experts}, TensorRole::kBias});
    }
    out.push_back({m.name + ".weight", {m.out_features, m.in_features}, TensorRole::kLinearWeight});
    if (m.has_bias) out.push_back({m.name + ".bias", {m.out_features}, TensorRole::kBias});
  }
  out.push_back({std::string(kFinalNormWeight), {c.hidden_size}, TensorRole::kNorm});
  return out;
}

}  // namespace fp8lm
