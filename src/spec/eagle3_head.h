// An EAGLE-3 draft head (issue 42; Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration
// of Large Language Models via Training-Time Test") as its checkpoints describe it, plain data:
// what the io layer (io/eagle3_config_json.h) reads from config.json and which tensors it then
// expects.
//
// The head drafts from the target's own features: at a position p it fuses the target's hidden
// states of three layers at p − 1 (low, middle, high: `fc`, 3·H → H), concatenates the embedding
// of the token at p (the target's embedding table unless the head ships its own) with that fused
// state, each RMS-normed (input_layernorm, hidden_norm), and runs one Llama decoder layer whose
// q/k/v projections take the 2·H concatenation; the residual is the fused state (normed, with
// norm_before_residual). The final norm and `lm_head` give logits over a reduced draft
// vocabulary; draft id d is target id d + d2t[d]. Each next draft step feeds the layer's own
// output as the fused state (post-norm with norm_output, Eagle 3.1).
//
// Two layouts exist:
//   * speculators (vLLM's library, PyPI `speculators`): config.json with
//     "speculators_model_type": "eagle3", the layer's Llama config in "transformer_layer_config";
//     tensors fc.weight, layers.0.*, norm.weight, lm_head.weight, d2t, t2d, and embed_tokens.weight
//     when the head keeps its own embedding.
//   * the EAGLE authors' release (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): a flat Llama config
//     with "architectures": ["LlamaForCausalLMEagle3"] and "draft_vocab_size"; the layer's tensors
//     under midlayer.*, no embedding (the target's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/model_config.h"

namespace fp8lm {

struct Eagle3HeadConfig {
  enum class Layout : uint8_t { kSpeculators, kEagleRelease };
  Layout layout = Layout::kSpeculators;
  // The decoder layer: a Llama config (hidden size, heads, MLP width, RoPE, vocabulary = the
  // target's). One layer.
  ModelConfig layer;
  int64_t draft_vocab_size = 0;
  int64_t target_hidden_size = 0;      // the target's hidden size: fc takes 3 × this
  std::vector<int> aux_layer_ids;      // the target layers whose input streams fc fuses; empty: vLLM's default
  bool norm_before_residual = false;   // the residual is hidden_norm(fused), not fused
  bool fc_norm = false;                // an RMSNorm (fc_norm.i) per fused hidden state
  bool norm_output = false;            // the post-norm output feeds the next draft step
};

// One tensor the head's checkpoint must hold: its name and shape, and whether it is a float
// weight (BF16 / F16 / F32) or one of the integer maps (d2t: I64, t2d: BOOL).
struct Eagle3Tensor {
  enum class Kind : uint8_t { kFloat, kI64, kBool };
  std::string name;
  std::vector<int64_t> shape;
  Kind kind = Kind::kFloat;
};

// The tensors `config` needs, in the layout's names. `own_embedding`: the checkpoint holds
// embed_tokens.weight ([target vocab, H]); else the target's table is used.
std::vector<Eagle3Tensor> eagle3_tensors(const Eagle3HeadConfig& config, bool own_embedding);

// vLLM's default auxiliary layers for a target of `layers` layers when a head names none:
// 2, layers / 2, layers − 3 — the residual stream entering those layers.
std::vector<int> eagle3_default_aux_layers(int layers);

}  // namespace fp8lm
