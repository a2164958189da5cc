// DeepSeek-V3's parts of LlamaModel (llama_model.h): multi-head latent
// attention and the DeepSeekMoE extras (shared experts, the router's
// correction bias), as transformers' DeepseekV3Attention / DeepseekV3MoE
// compute them, over the backend ops (rope_mla, mla_attention: backend/ops.h).
//
// An MLA layer from its normed input x:
//   q      = q_proj(x), or q_b(rms(q_a(x)))              [rows, heads · (nope + rope)]
//   kv_a   = kv_a_proj_with_mqa(x) = [c ‖ k_pe]           [rows, latent + rope]
//   c      = rms(c) (kv_a_layernorm);  rope on each head's q rope part and on k_pe
//   out    = mla_attention(q, c, k_pe)                    [rows, heads · v], then o_proj
// The cache keeps [c ‖ k_pe] a token (one entry for all heads); the attention
// runs absorbed (q_nope through W_UK into the latent space, the result through
// W_UV), for prefill and decode alike: a row's output is then the same however
// its sequence was split into steps or batched.
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/llama_model.h"

namespace fp8lm::model {

void LlamaModel::upload_mla(Layer& l, const loader::HostMla& h) {
  const MlaConfig& a = config_.mla;
  if (a.q_lora_rank > 0) {
    l.q_a = ops_.upload_linear(h.q_a);
    l.q_a_norm = ops_.upload_vector(h.q_a_norm);
    l.q_b = ops_.upload_linear(h.q_b);
  } else {
    l.q = ops_.upload_linear(h.q_proj);
  }
  l.kv_a = ops_.upload_linear(h.kv_a);
  l.kv_a_norm = ops_.upload_vector(h.kv_a_norm);
  l.mla_up = ops_.upload_mla_up_projections(h.kv_b, config_.num_attention_heads, a.qk_nope_head_dim, a.v_head_dim);
}

LlamaModel::MlaTensors LlamaModel::alloc_mla_tensors(int64_t rows) {
  const MlaConfig& a = config_.mla;
  const int64_t heads = config_.num_attention_heads;
  MlaTensors t;
  if (a.q_lora_rank > 0) {
    t.q_a = ops_.alloc(rows, a.q_lora_rank);
    t.q_a_normed = ops_.alloc(rows, a.q_lora_rank);
  }
  t.q = ops_.alloc(rows, heads * a.qk_head_dim());
  t.kv_a = ops_.alloc(rows, a.latent_width());
  t.latent = ops_.alloc(rows, a.kv_lora_rank);
  t.latent_normed = ops_.alloc(rows, a.kv_lora_rank);
  t.k_pe = ops_.alloc(rows, a.qk_rope_head_dim);
  t.out = ops_.alloc(rows, heads * a.v_head_dim);
  return t;
}

void LlamaModel::mla_attention(int layer, Layer& l, backend::Tensor x, MlaTensors& t, backend::KvCache& cache) {
  const MlaConfig& a = config_.mla;
  const auto latent_eps = float(a.latent_norm_eps);
  if (a.q_lora_rank > 0) {
    ops_.linear(x, *l.q_a, t.q_a);
    ops_.rms_norm(t.q_a, *l.q_a_norm, latent_eps, t.q_a_normed, l.q_b.get());
    ops_.linear(t.q_a_normed, *l.q_b, t.q);
  } else {
    ops_.linear(x, *l.q, t.q);
  }
  ops_.linear(x, *l.kv_a, t.kv_a);
  const backend::Tensor parts[] = {t.latent, t.k_pe};
  ops_.split_columns(t.kv_a, parts);
  ops_.rms_norm(t.latent, *l.kv_a_norm, latent_eps, t.latent_normed);
  ops_.rope_mla(t.q, t.k_pe, a.qk_nope_head_dim, rope_, a.rope_interleave);
  if (observer_ != nullptr) observe_latent_entries(layer, t);
  backend::MlaParams p;
  p.num_heads = config_.num_attention_heads;
  p.nope_dim = a.qk_nope_head_dim;
  p.rope_dim = a.qk_rope_head_dim;
  p.v_dim = a.v_head_dim;
  p.latent_dim = a.kv_lora_rank;
  p.scale = mla_scale_;
  p.absorbed = mla_absorbed_;
  ops_.mla_attention(t.q, t.latent_normed, t.k_pe, *l.mla_up, t.out, p, cache, layer);
}

void LlamaModel::observe_latent_entries(int layer, const MlaTensors& t) {
  // What the cache stores, [latent ‖ k_pe] a row, given as K and as V (a latent cache has one
  // array and one scale: the layer's k_scale, from this K's range).
  const int64_t rows = t.latent_normed.rows, lat = t.latent_normed.cols, rd = t.k_pe.cols;
  std::vector<float> latent(size_t(rows * lat)), k_pe(size_t(rows * rd));
  ops_.to_host(t.latent_normed, latent);
  ops_.to_host(t.k_pe, k_pe);
  observed_.resize(size_t(rows * (lat + rd)));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(latent.data() + r * lat, lat, observed_.data() + r * (lat + rd));
    std::copy_n(k_pe.data() + r * rd, rd, observed_.data() + r * (lat + rd) + lat);
  }
  observer_->key_value(layer, observed_, observed_, rows, lat + rd);
}

void LlamaModel::upload_deepseek_moe(Layer& l, const loader::HostMoe& h) {
  const MoeConfig& m = config_.moe;
  l.routing = {m.num_experts_per_tok, m.norm_topk_prob, m.scoring, m.n_group, m.topk_group,
               float(m.routed_scaling_factor), nullptr};
  if (m.correction_bias) {
    if (int64_t(h.router_bias.size()) != m.num_experts)
      throw Error("model: an MoE layer's correction bias holds " + std::to_string(h.router_bias.size()) +
                  " values for " + std::to_string(m.num_experts) + " experts");
    l.router_bias = ops_.upload_vector(h.router_bias);
    l.routing.correction_bias = l.router_bias.get();
  }
  if (m.n_shared_experts > 0) {
    l.shared_gate = ops_.upload_linear(h.shared_gate);
    l.shared_up = ops_.upload_linear(h.shared_up);
    l.shared_down = ops_.upload_linear(h.shared_down);
  }
}

LlamaModel::SharedTensors LlamaModel::alloc_shared_tensors(int64_t rows) {
  const int64_t width = config_.moe.moe_intermediate_size * config_.moe.n_shared_experts;
  return {ops_.alloc(rows, width), ops_.alloc(rows, width), ops_.alloc(rows, width),
          ops_.alloc(rows, config_.hidden_size)};
}

void LlamaModel::add_shared_experts(const Layer& l, backend::Tensor x, SharedTensors& t, backend::Tensor out) {
  if (!l.shared_gate) return;
  // transformers: routed experts' sum + shared_experts(x), in that order.
  ops_.linear(x, *l.shared_gate, t.gate);
  ops_.linear(x, *l.shared_up, t.up);
  ops_.silu_mul(t.gate, t.up, t.act);
  ops_.linear(t.act, *l.shared_down, t.out);
  ops_.add(out, t.out);
}

}  // namespace fp8lm::model
