// What a model is, as its Hugging Face `config.json` describes it: the
// architecture, its sizes and the options that change which tensors exist or
// how they are used (RoPE scaling, biases, q/k norms, sliding window, MoE).
// Plain data: the io layer (model_config_json.h) reads it from JSON and
// accepts only the architectures fp8lm runs (or will run); anything else is
// an error that lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm {

// One entry per `architectures[0]` value fp8lm accepts.
enum class Architecture : uint8_t { kLlama, kQwen2, kQwen3, kMistral, kQwen3Moe, kMixtral, kDeepseekV3 };

// The Hugging Face class names, in the order of the enum.
std::span<const std::string_view> supported_architectures();
std::string_view name(Architecture a);

enum class RopeScalingType : uint8_t { kNone, kLinear, kDynamic, kLlama3, kYarn };
std::string_view name(RopeScalingType t);

// `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5). Only
// the fields of the chosen type are meaningful; the others keep their defaults.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                        // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (0 = not given)
  double beta_fast = 32.0;                    // yarn
  double beta_slow = 1.0;                     // yarn
  double mscale = 0.0;                        // yarn; 0 = not given (transformers' None)
  double mscale_all_dim = 0.0;                // yarn
  std::optional<double> attention_factor;     // yarn; absent = derived from factor
  bool operator==(const RopeScaling&) const = default;
};

// Element type the model was trained/saved in (`torch_dtype` / `dtype`).
enum class ModelDType : uint8_t { kBF16, kF16, kF32 };
std::string_view name(ModelDType d);

// How a router turns its logits into expert scores: softmax over the experts
// (Qwen3-MoE, Mixtral) or an independent sigmoid per expert (DeepSeek-V3).
enum class MoeScoring : uint8_t { kSoftmax, kSigmoid };

struct MoeConfig {
  int num_experts = 0;            // 0: dense model
  int num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;  // per-expert MLP width
  bool norm_topk_prob = false;    // renormalise the top-k router weights
  int decoder_sparse_step = 1;    // Qwen3-MoE: every step-th layer is sparse
  std::vector<int> mlp_only_layers;  // Qwen3-MoE: layers forced dense
  // DeepSeek-V3 (DeepSeekMoE, topk_method "noaux_tc"): sigmoid scores; the
  // experts chosen from score + e_score_correction_bias (the bias selects, it
  // never weighs) within the topk_group best of n_group groups, a group's
  // score the sum of its two best; the chosen scores weigh the experts,
  // renormalised with norm_topk_prob, then × routed_scaling_factor. Shared
  // experts: one SwiGLU MLP of n_shared_experts × moe_intermediate_size that
  // every token runs. Layers before first_k_dense_replace are dense.
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool correction_bias = false;   // the router has e_score_correction_bias
  int n_group = 1;
  int topk_group = 1;
  double routed_scaling_factor = 1.0;
  int n_shared_experts = 0;
  int first_k_dense_replace = 0;
};

// Multi-head latent attention (DeepSeek-V2/V3): per token one compressed
// latent c (kv_lora_rank values, after kv_a_layernorm) and one roped key part
// k_pe (qk_rope_head_dim) shared by every head; kv_b_proj expands c into each
// head's k_nope (qk_nope_head_dim) and v (v_head_dim). Queries come from
// q_proj, or with q_lora_rank > 0 from q_b_proj(q_a_layernorm(q_a_proj(x))).
struct MlaConfig {
  int64_t q_lora_rank = 0;       // 0: q_proj (config null)
  int64_t kv_lora_rank = 0;      // 0: not MLA
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // RoPE over interleaved pairs (x0, x1), (x2, x3), … of the rope part
  // (transformers' rope_interleave, DeepSeek's layout) instead of halves.
  bool rope_interleave = true;
  // q_a_layernorm / kv_a_layernorm: transformers builds them with RMSNorm's
  // default eps, not rms_norm_eps.
  double latent_norm_eps = 1e-6;
  int num_nextn_predict_layers = 0;  // MTP layers stored after the decoder's: read and skipped

  bool enabled() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t latent_width() const { return kv_lora_rank + qk_rope_head_dim; }  // one cache entry
};

struct ModelConfig {
  std::string architecture;  // as written, e.g. "LlamaForCausalLM"
  Architecture arch = Architecture::kLlama;
  std::string model_type;    // "llama", "qwen2", ...

  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP width (Mixtral: each expert's)
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;    // defaults to num_attention_heads
  int64_t head_dim = 0;           // explicit, or hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;

  // Biases: q/k/v (Qwen2 always; Llama/Qwen3 with attention_bias), o_proj
  // (Llama/Qwen3 with attention_bias), MLP projections (Llama mlp_bias).
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k

  // Sliding-window attention: window size for layers >= sliding_window_from_layer.
  std::optional<int64_t> sliding_window;
  int sliding_window_from_layer = 0;

  MoeConfig moe;
  MlaConfig mla;  // DeepSeek-V3; head_dim is then qk_rope_head_dim, as transformers sets it (RoPE's width)
  std::vector<int64_t> bos_token_ids;  // empty when not given
  std::vector<int64_t> eos_token_ids;
  ModelDType dtype = ModelDType::kF32;  // transformers' default when absent

  bool is_moe() const { return moe.num_experts > 0; }
  // Whether decoder layer `layer` has a sparse MoE block instead of a dense MLP.
  bool is_moe_layer(int layer) const;
  // Whether the MoE layer names its experts the Mixtral way (block_sparse_moe.experts.E.w1).
  bool mixtral_naming() const { return arch == Architecture::kMixtral; }
  bool is_mla() const { return mla.enabled(); }
};

}  // namespace fp8lm
