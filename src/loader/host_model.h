// What the loader hands the model: every weight of a Llama-family model (MoE
// blocks included) as a host description the backends upload from.
// Header-only and apart from host_weights.h, so both loaders (the checkpoint
// one, host_weights.h, and the dummy one, dummy_weights.h) and the model build
// on it without including each other.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/model_spec.h"
#include "spec/model_tensors.h"
#include "weights/linear_weight.h"

namespace fp8lm::loader {

// A sparse MoE block (Qwen3-MoE, Mixtral): the router [experts, hidden] and
// each expert's SwiGLU projections, expert e at index e.
struct HostMoe {
  weights::LinearWeight router;
  std::vector<weights::LinearWeight> gate, up, down;
  std::vector<float> router_bias;  // DeepSeek-V3's e_score_correction_bias (empty: none)
  // DeepSeek-V3's shared experts as one SwiGLU MLP (empty weights when the config has none).
  weights::LinearWeight shared_gate, shared_up, shared_down;
};

// A multi-head latent attention block (DeepSeek-V3); o_proj is HostLayer::o.
struct HostMla {
  weights::LinearWeight q_proj;           // without q_lora_rank
  weights::LinearWeight q_a, q_b;         // with q_lora_rank
  std::vector<float> q_a_norm;            // with q_lora_rank
  weights::LinearWeight kv_a, kv_b;       // kv_a_proj_with_mqa [latent + rope, H], kv_b_proj
  std::vector<float> kv_a_norm;
};

struct HostLayer {
  std::vector<float> input_norm, post_attention_norm;
  std::vector<float> q_norm, k_norm;  // Qwen3 only (head_dim values)
  std::optional<HostMla> mla;         // DeepSeek-V3: instead of q, k, v
  weights::LinearWeight q, k, v, o;
  weights::LinearWeight gate, up, down;  // the dense MLP; empty in an MoE layer
  std::optional<HostMoe> moe;            // an MoE layer's block instead (ModelConfig::is_moe_layer)
};

struct HostModelWeights {
  weights::LinearWeight embedding;  // [vocab, hidden], high precision
  std::vector<HostLayer> layers;
  std::vector<float> final_norm;
  weights::LinearWeight lm_head;    // the embedding table again when tied
  // Per-layer KV-cache scales from the checkpoint (empty: none stored).
  std::vector<float> k_scales, v_scales;
};

// Called after each decoder layer is loaded (layer index, layer count).
using LoadProgress = std::function<void(int layer, int layers)>;

// The cheap part of the loaders' checks, for callers that want to refuse a
// model before loading anything else: every expert projection of an MoE layer
// must have one quantization scheme, because a layer's experts run as one
// block (Ops::moe; vLLM's fused MoE likewise loads one scheme per layer). The
// format parsers already skip a layer's experts as a whole where a list names
// one; what remains is a checkpoint or --keep-bf16 pattern that splits them.
inline void check_supported(const io::ModelSpec& spec) {
  std::map<int, const io::LinearLayerSpec*> first_expert;  // per layer
  for (const io::LinearLayerSpec& l : spec.linears) {
    if (l.module.kind != LinearKind::kExpert) continue;
    const io::LinearLayerSpec*& first = first_expert[l.module.layer];
    if (first == nullptr) first = &l;
    else if (!(l.scheme == first->scheme))
      throw Error(spec.directory.string() + ": the experts of layer " + std::to_string(l.module.layer) +
                  " do not share one quantization scheme: " + l.module.name + " is '" + l.scheme.describe() +
                  "', " + first->module.name + " is '" + first->scheme.describe() +
                  "'; fp8lm runs a layer's experts as one block with one scheme");
  }
}
// The spec's linear layers by module name, for both loaders (checkpoint and dummy).
class LinearSpecs {
 public:
  explicit LinearSpecs(const io::ModelSpec& spec) : directory_(spec.directory.string()) {
    for (const io::LinearLayerSpec& l : spec.linears) by_name_[l.module.name] = &l;
  }
  const io::LinearLayerSpec& at(const std::string& module) const {
    const auto it = by_name_.find(module);
    if (it == by_name_.end()) throw Error(directory_ + ": no linear module '" + module + "'");
    return *it->second;
  }

 private:
  std::string directory_;
  std::map<std::string, const io::LinearLayerSpec*> by_name_;
};

// A layer's projections, each `linear(module name)` (the loader's way of
// making one: read from the checkpoint, or random): attention, then the dense
// MLP or, in an MoE layer, the router and every expert.
template <typename MakeLinear>
void set_projections(HostLayer& l, const ModelConfig& c, int layer, MakeLinear&& linear) {
  const LayerTensorNames n = layer_tensor_names(layer);
  if (c.is_mla()) {
    const MlaTensorNames a = mla_tensor_names(layer);
    HostMla& m = l.mla.emplace();
    if (c.mla.q_lora_rank > 0) {
      m.q_a = linear(a.q_a_proj);
      m.q_b = linear(a.q_b_proj);
    } else {
      m.q_proj = linear(a.q_proj);
    }
    m.kv_a = linear(a.kv_a_proj);
    m.kv_b = linear(a.kv_b_proj);
  } else {
    l.q = linear(n.q_proj);
    l.k = linear(n.k_proj);
    l.v = linear(n.v_proj);
  }
  l.o = linear(n.o_proj);
  if (!c.is_moe_layer(layer)) {
    l.gate = linear(n.gate_proj);
    l.up = linear(n.up_proj);
    l.down = linear(n.down_proj);
    return;
  }
  const MoeTensorNames m = moe_tensor_names(c, layer);
  HostMoe& b = l.moe.emplace();
  b.router = linear(m.router);
  for (const ExpertTensorNames& e : m.experts) {
    b.gate.push_back(linear(e.gate_proj));
    b.up.push_back(linear(e.up_proj));
    b.down.push_back(linear(e.down_proj));
  }
  if (c.moe.n_shared_experts > 0) {
    b.shared_gate = linear(m.shared.gate_proj);
    b.shared_up = linear(m.shared.up_proj);
    b.shared_down = linear(m.shared.down_proj);
  }
}

// A layer's vectors besides input / post-attention norms: Qwen3's q/k norms, MLA's latent norms,
// DeepSeek's router bias, each `floats(tensor name, size, is_norm)` (the loader's way: read, or
// made up: 1 for a norm, 0 otherwise). After set_projections.
template <typename MakeFloats>
void set_layer_vectors(HostLayer& l, const ModelConfig& c, int layer, MakeFloats&& floats) {
  const LayerTensorNames n = layer_tensor_names(layer);
  if (c.qk_norm) {
    l.q_norm = floats(n.q_norm, c.head_dim, true);
    l.k_norm = floats(n.k_norm, c.head_dim, true);
  }
  if (l.mla) {
    const MlaTensorNames a = mla_tensor_names(layer);
    if (c.mla.q_lora_rank > 0) l.mla->q_a_norm = floats(a.q_a_norm, c.mla.q_lora_rank, true);
    l.mla->kv_a_norm = floats(a.kv_a_norm, c.mla.kv_lora_rank, true);
  }
  if (l.moe && c.moe.correction_bias)
    l.moe->router_bias = floats(moe_tensor_names(c, layer).router_bias, c.moe.num_experts, false);
}

// Bytes the weights occupy in memory as loaded (FP8 codes at 1 byte, scales,
// high-precision tensors at their stored width), for statistics.
inline uint64_t resident_weight_bytes(const HostModelWeights& w) {
  uint64_t total = w.embedding.resident_bytes() + 4 * w.final_norm.size();
  for (const HostLayer& l : w.layers) {
    total += 4 * (l.input_norm.size() + l.post_attention_norm.size() + l.q_norm.size() + l.k_norm.size());
    for (const weights::LinearWeight* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      total += x->resident_bytes();
    if (l.mla) {
      total += 4 * (l.mla->q_a_norm.size() + l.mla->kv_a_norm.size());
      for (const weights::LinearWeight* x : {&l.mla->q_proj, &l.mla->q_a, &l.mla->q_b, &l.mla->kv_a, &l.mla->kv_b})
        total += x->resident_bytes();
    }
    if (l.moe) {
      total += l.moe->router.resident_bytes() + 4 * l.moe->router_bias.size();
      for (const weights::LinearWeight* x : {&l.moe->shared_gate, &l.moe->shared_up, &l.moe->shared_down})
        total += x->resident_bytes();
      for (const auto* experts : {&l.moe->gate, &l.moe->up, &l.moe->down})
        for (const weights::LinearWeight& x : *experts) total += x.resident_bytes();
    }
  }
  if (w.lm_head.data != w.embedding.data) total += w.lm_head.resident_bytes();
  return total;
}

// The part of resident_weight_bytes in MoE experts (not routers).
inline uint64_t resident_expert_bytes(const HostModelWeights& w) {
  uint64_t total = 0;
  for (const HostLayer& l : w.layers)
    if (l.moe)
      for (const auto* experts : {&l.moe->gate, &l.moe->up, &l.moe->down})
        for (const weights::LinearWeight& x : *experts) total += x.resident_bytes();
  return total;
}

}  // namespace fp8lm::loader
