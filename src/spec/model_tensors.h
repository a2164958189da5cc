// The tensors an architecture needs, by Hugging Face checkpoint name and
// shape: every linear module with its [N, K] = [out, in] weight shape, and the
// other tensors (embeddings, norms, biases). The loader and `inspect` compare a
// checkpoint against this list, so a missing or unexpected tensor is named.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spec/model_config.h"

namespace fp8lm {

enum class LinearKind : uint8_t {
  kAttention,  // q/k/v/o_proj
  kMlp,        // dense gate/up/down_proj
  kExpert,     // one projection of one MoE expert
  kRouter,     // MoE router (`mlp.gate`, `block_sparse_moe.gate`): never quantized
  kLmHead,     // output projection (absent when tied to the embeddings)
};

// The checkpoint names of a Llama-family model's tensors: the one table the
// expected-tensor list, the checkpoint loader and the dummy weights all read,
// so a name is spelled once (MoE blocks: moe_tensor_names below). Declared after
// LinearKind: declared before it, kLmHead would be shadowed by its enumerator
// (-Wshadow).
inline constexpr std::string_view kEmbedTokensWeight = "model.embed_tokens.weight";
inline constexpr std::string_view kFinalNormWeight = "model.norm.weight";
inline constexpr std::string_view kLmHead = "lm_head";  // module name; the weight is "lm_head.weight"

// One dense decoder layer: norms are tensor names, projections module names
// (their tensors are "<module>.weight", "<module>.bias").
struct LayerTensorNames {
  std::string input_norm, post_attention_norm, q_norm, k_norm;  // "model.layers.<i>.input_layernorm.weight", ...
  std::string q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;  // "model.layers.<i>.self_attn.q_proj", ...
};
LayerTensorNames layer_tensor_names(int layer);

// One MoE block's module names (Qwen3-MoE `mlp.gate`, `mlp.experts.E.gate_proj`;
// Mixtral `block_sparse_moe.gate`, `block_sparse_moe.experts.E.w1` = gate,
// w3 = up, w2 = down): what linear_modules lists and both loaders read.
struct ExpertTensorNames {
  std::string gate_proj, up_proj, down_proj;
};
struct MoeTensorNames {
  std::string router;
  std::vector<ExpertTensorNames> experts;  // config.moe.num_experts of them
  // DeepSeek-V3 only (empty otherwise): the router's e_score_correction_bias
  // tensor and the shared experts' module names (`mlp.shared_experts.*_proj`).
  std::string router_bias;
  ExpertTensorNames shared;
};
MoeTensorNames moe_tensor_names(const ModelConfig& config, int layer);

// One multi-head latent attention block's names (DeepSeek-V3, `self_attn.*`):
// projections are module names, norms tensor names; o_proj is
// LayerTensorNames::o_proj. q_proj without q_lora_rank, else q_a/q_a_layernorm/q_b.
struct MlaTensorNames {
  std::string q_proj, q_a_proj, q_a_norm, q_b_proj, kv_a_proj, kv_a_norm, kv_b_proj;
};
MlaTensorNames mla_tensor_names(int layer);
// The prefix of the tensors of DeepSeek's multi-token-prediction layers, which
// follow the decoder's layers ("model.layers.<num_hidden_layers + i>."): fp8lm
// reads past them (no speculative use yet). Empty when the config has none.
std::vector<std::string> mtp_layer_prefixes(const ModelConfig& config);

struct LinearModule {
  std::string name;       // module name; the weight is `<name>.weight`
  int64_t out_features;   // N
  int64_t in_features;    // K
  int layer = -1;         // decoder layer, -1 for lm_head
  int expert = -1;        // expert index for kExpert
  LinearKind kind = LinearKind::kAttention;
  bool has_bias = false;  // `<name>.bias` of shape [N] exists
};

// In checkpoint order: layers 0..L-1 (attention, then MLP / router + experts), lm_head.
// With tie_word_embeddings there is no lm_head module: the output projection
// reuses `model.embed_tokens.weight`.
std::vector<LinearModule> linear_modules(const ModelConfig& config);

enum class TensorRole : uint8_t { kEmbedding, kNorm, kLinearWeight, kBias };

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role;
};

// Every tensor of the architecture in high precision: embeddings, norms
// (incl. Qwen3's q_norm/k_norm), each linear's weight and bias. An FP8
// checkpoint has the same names; its scales come from each layer's scheme.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Number of linear modules / tensors without building the lists (cheap; used
// to refuse absurd configs before allocating).
int64_t count_linear_modules(const ModelConfig& config);

}  // namespace fp8lm
