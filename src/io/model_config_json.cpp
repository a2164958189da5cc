#include "io/model_config_json.h"

#include <array>
#include <cmath>

#include "common/error.h"
#include "io/json_file.h"

namespace fp8lm::io {
namespace {

using nlohmann::json;

// transformers' model_type of each architecture, in the order of the enum.
constexpr std::array<std::string_view, 7> kModelTypes = {"llama",     "qwen2",   "qwen3",      "mistral",
                                                         "qwen3_moe", "mixtral", "deepseek_v3"};

// Generous upper bounds: far above any real model, low enough that shape
// arithmetic (N * K, layers * experts) can never overflow int64.
constexpr int64_t kMaxWidth = int64_t{1} << 24;     // hidden, intermediate, head_dim
constexpr int64_t kMaxVocab = int64_t{1} << 26;
constexpr int64_t kMaxLayers = 100000;
constexpr int64_t kMaxHeads = 1 << 16;
constexpr int64_t kMaxExperts = 1 << 16;

std::string joined_architectures() {
  std::string s;
  for (std::string_view a : supported_architectures()) {
    if (!s.empty()) s += ", ";
    s += a;
  }
  return s;
}

// Reads an integer field that must lie in [lo, hi]; `fallback` when absent/null.
int64_t int_field(const json& c, const std::string& key, const std::string& origin, int64_t lo,
                  int64_t hi, std::optional<int64_t> fallback = std::nullopt) {
  std::optional<int64_t> v = optional<int64_t>(c, key, origin);
  if (!v) {
    if (!fallback) throw Error(origin + ": required field '" + key + "' is missing");
    return *fallback;
  }
  if (*v < lo || *v > hi)
    throw Error(origin + ": field '" + key + "' must be in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "], got " + std::to_string(*v));
  return *v;
}

double positive_number(const json& c, const std::string& key, const std::string& origin,
                       std::optional<double> fallback) {
  std::optional<double> v = optional<double>(c, key, origin);
  if (!v) {
    if (!fallback) throw Error(origin + ": required field '" + key + "' is missing");
    return *fallback;
  }
  if (!std::isfinite(*v) || *v <= 0)
    throw Error(origin + ": field '" + key + "' must be a positive number, got " + c.at(key).dump());
  return *v;
}

Architecture parse_architecture(const json& c, const std::string& origin, std::string& written) {
  const auto it = c.find("architectures");
  if (it == c.end() || it->is_null())
    throw Error(origin + ": required field 'architectures' is missing (supported: " +
                joined_architectures() + ")");
  if (!it->is_array() || it->empty() || !(*it)[0].is_string())
    throw Error(origin + ": field 'architectures' must be a non-empty list of strings");
  if (it->size() > 1)
    throw Error(origin + ": field 'architectures' lists " + std::to_string(it->size()) +
                " classes; fp8lm reads single-architecture checkpoints");
  written = (*it)[0].get<std::string>();
  const std::span<const std::string_view> names = supported_architectures();
  for (size_t i = 0; i < names.size(); ++i)
    if (written == names[i]) return static_cast<Architecture>(i);
  throw Error(origin + ": architecture '" + written + "' is not supported; fp8lm reads " +
              joined_architectures());
}

ModelDType parse_dtype(const json& c, const std::string& origin) {
  // transformers 5 writes `dtype`; earlier versions `torch_dtype`.
  std::string key = c.contains("dtype") && !c["dtype"].is_null() ? "dtype" : "torch_dtype";
  std::optional<std::string> s = optional<std::string>(c, key, origin);
  if (!s) return ModelDType::kF32;  // PretrainedConfig's default
  std::string v = *s;
  if (v.rfind("torch.", 0) == 0) v = v.substr(6);
  if (v == "bfloat16") return ModelDType::kBF16;
  if (v == "float16" || v == "half") return ModelDType::kF16;
  if (v == "float32" || v == "float") return ModelDType::kF32;
  throw Error(origin + ": field '" + key + "' must be bfloat16, float16 or float32, got '" + *s + "'");
}

std::vector<int64_t> parse_token_ids(const json& c, const std::string& key, const std::string& origin) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) return {};
  auto one = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw Error(origin + ": field '" + key + "' must be a non-negative integer or a list of them, got " +
                  v.dump());
    return v.get<int64_t>();
  };
  if (!it->is_array()) return {one(*it)};
  std::vector<int64_t> ids;
  for (const json& v : *it) ids.push_back(one(v));
  return ids;
}

// A field whose only value fp8lm implements is `implemented` (absent and null
// mean that too): anything else changes the math, so it is refused by name.
void require_value(const json& c, const std::string& key, const json& implemented, const std::string& where,
                   const std::string& why) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null() || *it == implemented) return;
  throw Error(where + ": field '" + key + "' is " + it->dump() + "; fp8lm implements only " + implemented.dump() +
              " (" + why + ")");
}

RopeScaling parse_rope_scaling(const json& r, const std::string& origin, const std::string& key) {
  RopeScaling s;
  if (!r.is_object()) throw Error(origin + ": field '" + key + "' must be an object or null");
  const std::string where = origin + ": " + key;
  // Rotary variants that no rope type here implements.
  require_value(r, "partial_rotary_factor", 1.0, where, "rotary embedding over the whole head");
  for (const char* multimodal : {"mrope_section", "mrope_interleaved"})
    if (r.contains(multimodal) && !r[multimodal].is_null())
      throw Error(where + ": field '" + multimodal + "' (multimodal RoPE) is not supported");
  // `rope_type` is the current key; `type` the original one. Both may appear.
  std::optional<std::string> type = optional<std::string>(r, "rope_type", where);
  if (!type) type = optional<std::string>(r, "type", where);
  if (!type || *type == "default") return s;
  auto factor = [&] { return positive_number(r, "factor", where, std::nullopt); };
  auto orig_max = [&](bool needed) {
    return int_field(r, "original_max_position_embeddings", where, 1, kMaxVocab * 1024,
                     needed ? std::nullopt : std::optional<int64_t>(0));
  };
  if (*type == "linear") {
    s.type = RopeScalingType::kLinear;
    s.factor = factor();
  } else if (*type == "dynamic") {
    s.type = RopeScalingType::kDynamic;
    s.factor = factor();
  } else if (*type == "llama3") {
    s.type = RopeScalingType::kLlama3;
    s.factor = factor();
    s.low_freq_factor = positive_number(r, "low_freq_factor", where, std::nullopt);
    s.high_freq_factor = positive_number(r, "high_freq_factor", where, std::nullopt);
    s.original_max_position_embeddings = orig_max(true);
    if (s.high_freq_factor <= s.low_freq_factor)
      throw Error(where + ": high_freq_factor must be greater than low_freq_factor");
  } else if (*type == "yarn") {
    s.type = RopeScalingType::kYarn;
    s.factor = factor();
    s.original_max_position_embeddings = orig_max(false);
    s.beta_fast = positive_number(r, "beta_fast", where, 32.0);
    s.beta_slow = positive_number(r, "beta_slow", where, 1.0);
    // Absent stays 0: transformers takes the mscale / mscale_all_dim ratio only when both are given.
    s.mscale = positive_number(r, "mscale", where, 0.0);
    std::optional<double> all = optional<double>(r, "mscale_all_dim", where);
    if (all && (!std::isfinite(*all) || *all < 0))
      throw Error(where + ": field 'mscale_all_dim' must be a non-negative number");
    s.mscale_all_dim = all.value_or(0.0);
    require_value(r, "truncate", true, where, "YaRN's correction range rounded to whole dimensions");
    if (r.contains("attention_factor") && !r["attention_factor"].is_null())
      s.attention_factor = positive_number(r, "attention_factor", where, std::nullopt);
  } else {
    throw Error(where + ": rope type '" + *type +
                "' is not supported (supported: default, linear, dynamic, llama3, yarn)");
  }
  return s;
}

// transformers' DeepseekV3Config defaults, used where config.json leaves a field out, so that an
// absent field means what it means to the reference.
namespace deepseek_default {
constexpr int64_t kKvLoraRank = 512, kQLoraRank = 1536, kQkRope = 64, kQkNope = 128, kVHead = 128;
constexpr int64_t kRoutedExperts = 256, kSharedExperts = 1, kTopK = 8, kGroups = 8, kTopKGroups = 4;
constexpr int64_t kFirstKDense = 3, kMoeWidth = 2048, kNextN = 1;
constexpr double kRoutedScaling = 2.5;
}  // namespace deepseek_default

// DeepSeek-V3: multi-head latent attention and DeepSeekMoE (spec/model_config.h, MlaConfig and
// MoeConfig). Every field transformers' DeepseekV3 reads, and the DeepSeek fields that would change
// the math, each checked or refused by name: transformers implements only sigmoid scoring with
// noaux_tc group-limited routing, every layer from first_k_dense_replace sparse.
void parse_deepseek_v3(const json& c, const std::string& origin, ModelConfig& m) {
  namespace d = deepseek_default;
  MlaConfig& a = m.mla;
  a.kv_lora_rank = int_field(c, "kv_lora_rank", origin, 1, kMaxWidth, d::kKvLoraRank);
  if (c.contains("q_lora_rank") && c["q_lora_rank"].is_null()) a.q_lora_rank = 0;  // q_proj
  else a.q_lora_rank = int_field(c, "q_lora_rank", origin, 1, kMaxWidth, d::kQLoraRank);
  a.qk_nope_head_dim = int_field(c, "qk_nope_head_dim", origin, 1, kMaxWidth, d::kQkNope);
  a.qk_rope_head_dim = int_field(c, "qk_rope_head_dim", origin, 2, kMaxWidth, d::kQkRope);
  if (a.qk_rope_head_dim % 2 != 0)
    throw Error(origin + ": field 'qk_rope_head_dim' must be even (RoPE rotates pairs), got " +
                std::to_string(a.qk_rope_head_dim));
  a.v_head_dim = int_field(c, "v_head_dim", origin, 1, kMaxWidth, d::kVHead);
  a.rope_interleave = optional<bool>(c, "rope_interleave", origin).value_or(true);
  a.num_nextn_predict_layers = static_cast<int>(
      int_field(c, "num_nextn_predict_layers", origin, 0, kMaxLayers,
                int_field(c, "num_mtp_layers", origin, 0, kMaxLayers, d::kNextN)));
  m.head_dim = a.qk_rope_head_dim;  // RoPE's width, as transformers sets head_dim
  // transformers expands K/V for every query head, then repeat_kv()s them by heads / kv heads:
  // anything but one KV head a query head fails there, so there is no reference for it.
  if (m.num_key_value_heads != m.num_attention_heads)
    throw Error(origin + ": field 'num_key_value_heads' (" + std::to_string(m.num_key_value_heads) +
                ") must equal num_attention_heads (" + std::to_string(m.num_attention_heads) +
                ") in multi-head latent attention");
  // transformers applies mscale_all_dim's softmax correction under any RoPE type but default; only
  // YaRN's is read here, so another type that gives one is refused rather than run without it.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const auto r = c.find(key);
    if (r == c.end() || !r->is_object() || m.rope_scaling.type == RopeScalingType::kYarn) continue;
    const auto all = r->find("mscale_all_dim");
    if (all != r->end() && !all->is_null() && *all != 0)
      throw Error(origin + ": field '" + key + ".mscale_all_dim' is " + all->dump() + " under RoPE type '" +
                  std::string(name(m.rope_scaling.type)) + "'; fp8lm implements it with yarn only");
  }

  MoeConfig& e = m.moe;
  e.num_experts = static_cast<int>(int_field(c, "n_routed_experts", origin, 1, kMaxExperts, d::kRoutedExperts));
  e.num_experts_per_tok =
      static_cast<int>(int_field(c, "num_experts_per_tok", origin, 1, e.num_experts,
                                 std::min(d::kTopK, int64_t{e.num_experts})));
  e.moe_intermediate_size = int_field(c, "moe_intermediate_size", origin, 1, kMaxWidth, d::kMoeWidth);
  e.n_shared_experts = static_cast<int>(int_field(c, "n_shared_experts", origin, 1, kMaxExperts, d::kSharedExperts));
  e.norm_topk_prob = optional<bool>(c, "norm_topk_prob", origin).value_or(true);
  e.routed_scaling_factor = positive_number(c, "routed_scaling_factor", origin, d::kRoutedScaling);
  e.first_k_dense_replace =
      static_cast<int>(int_field(c, "first_k_dense_replace", origin, 0, m.num_hidden_layers, d::kFirstKDense));
  e.scoring = MoeScoring::kSigmoid;
  e.correction_bias = true;
  require_value(c, "scoring_func", "sigmoid", origin,
                "transformers' DeepseekV3 scores experts by sigmoid only, so no reference exists for another");
  require_value(c, "topk_method", "noaux_tc", origin,
                "group-limited top-k over score + e_score_correction_bias; transformers' DeepseekV3 implements "
                "no other (DeepSeek-V2's greedy / group_limited_greedy)");
  require_value(c, "moe_layer_freq", 1, origin,
                "every layer from first_k_dense_replace on is sparse, as transformers runs it");
  require_value(c, "ep_size", 1, origin, "expert parallelism is not a property of the model");
  e.n_group = static_cast<int>(
      int_field(c, "n_group", origin, 1, e.num_experts, std::min(d::kGroups, int64_t{e.num_experts})));
  if (e.num_experts % e.n_group != 0 || e.num_experts / e.n_group < 2)
    throw Error(origin + ": field 'n_group' (" + std::to_string(e.n_group) + ") must divide n_routed_experts (" +
                std::to_string(e.num_experts) + ") into groups of at least 2 (a group scores as its two best)");
  e.topk_group = static_cast<int>(
      int_field(c, "topk_group", origin, 1, e.n_group, std::min(d::kTopKGroups, int64_t{e.n_group})));
  if (int64_t{e.topk_group} * (e.num_experts / e.n_group) < e.num_experts_per_tok)
    throw Error(origin + ": fields 'topk_group' (" + std::to_string(e.topk_group) + ") groups of " +
                std::to_string(e.num_experts / e.n_group) + " experts hold fewer than num_experts_per_tok (" +
                std::to_string(e.num_experts_per_tok) + ")");
}

}  // namespace

ModelConfig parse_model_config(const json& c, const std::string& origin) {
  if (!c.is_object()) throw Error(origin + ": expected a JSON object");
  ModelConfig m;
  m.arch = parse_architecture(c, origin, m.architecture);
  m.model_type = optional<std::string>(c, "model_type", origin).value_or("");
  const std::string_view expected_type = kModelTypes[static_cast<size_t>(m.arch)];
  if (!m.model_type.empty() && m.model_type != expected_type)
    throw Error(origin + ": field 'model_type' is '" + m.model_type + "' but architectures names " + m.architecture +
                ", whose model_type is '" + std::string(expected_type) + "'");

  // Options that change the math and that no supported architecture
  // implements: refused by name rather than run as something else.
  // transformers' ACT2FN maps "swish" to the same nn.SiLU.
  if (!(c.contains("hidden_act") && c["hidden_act"] == "swish"))
    require_value(c, "hidden_act", "silu", origin, "the SwiGLU MLP");
  require_value(c, "hidden_activation", "silu", origin, "the SwiGLU MLP");
  require_value(c, "partial_rotary_factor", 1.0, origin, "rotary embedding over the whole head");
  require_value(c, "attn_logit_softcapping", nullptr, origin, "no attention logit soft-capping");
  require_value(c, "final_logit_softcapping", nullptr, origin, "no final logit soft-capping");
  require_value(c, "use_qk_norm", false, origin, "Qwen3's q/k RMSNorm is implied by its architecture");

  m.hidden_size = int_field(c, "hidden_size", origin, 1, kMaxWidth);
  m.num_hidden_layers = static_cast<int>(int_field(c, "num_hidden_layers", origin, 1, kMaxLayers));
  m.num_attention_heads = static_cast<int>(int_field(c, "num_attention_heads", origin, 1, kMaxHeads));
  m.num_key_value_heads = static_cast<int>(
      int_field(c, "num_key_value_heads", origin, 1, kMaxHeads, m.num_attention_heads));
  if (m.num_attention_heads % m.num_key_value_heads != 0)
    throw Error(origin + ": field 'num_key_value_heads' (" + std::to_string(m.num_key_value_heads) +
                ") must divide num_attention_heads (" + std::to_string(m.num_attention_heads) + ")");
  if (m.arch == Architecture::kDeepseekV3) {
    // Set with the MLA fields below (transformers: head_dim = qk_rope_head_dim, whatever is written).
  } else if (c.contains("head_dim") && !c["head_dim"].is_null()) {
    m.head_dim = int_field(c, "head_dim", origin, 1, kMaxWidth);
  } else {
    if (m.hidden_size % m.num_attention_heads != 0)
      throw Error(origin + ": hidden_size (" + std::to_string(m.hidden_size) +
                  ") is not divisible by num_attention_heads (" + std::to_string(m.num_attention_heads) +
                  ") and no head_dim is given");
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  m.vocab_size = int_field(c, "vocab_size", origin, 1, kMaxVocab);
  m.max_position_embeddings = int_field(c, "max_position_embeddings", origin, 1, kMaxVocab * 1024);
  m.rms_norm_eps = positive_number(c, "rms_norm_eps", origin, std::nullopt);
  m.tie_word_embeddings = optional<bool>(c, "tie_word_embeddings", origin).value_or(false);

  // RoPE: transformers 5 moved theta and scaling into `rope_parameters`.
  if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
    const json& rp = c["rope_parameters"];
    m.rope_scaling = parse_rope_scaling(rp, origin, "rope_parameters");
    m.rope_theta = positive_number(rp, "rope_theta", origin + ": rope_parameters",
                                   positive_number(c, "rope_theta", origin, 10000.0));
  } else {
    m.rope_theta = positive_number(c, "rope_theta", origin, 10000.0);
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
      m.rope_scaling = parse_rope_scaling(c["rope_scaling"], origin, "rope_scaling");
  }

  const bool attention_bias = optional<bool>(c, "attention_bias", origin).value_or(false);
  switch (m.arch) {
    case Architecture::kQwen2:
      m.qkv_bias = true;  // Qwen2Attention hard-codes bias on q/k/v, none on o
      break;
    case Architecture::kLlama:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:
      m.qkv_bias = m.o_bias = attention_bias;
      break;
    case Architecture::kMistral:
    case Architecture::kMixtral:
      break;  // no biases
    case Architecture::kDeepseekV3:
      require_value(c, "attention_bias", false, origin,
                    "biases on q_a_proj / kv_a_proj_with_mqa / o_proj are not implemented");
      break;
  }
  if (m.arch == Architecture::kLlama) {
    m.mlp_bias = optional<bool>(c, "mlp_bias", origin).value_or(false);
  } else {
    require_value(c, "mlp_bias", false, origin, m.architecture + " has no MLP biases");
  }
  if (m.arch == Architecture::kMistral || m.arch == Architecture::kMixtral)
    require_value(c, "attention_bias", false, origin, m.architecture + " has no attention biases");
  m.qk_norm = m.arch == Architecture::kQwen3 || m.arch == Architecture::kQwen3Moe;

  // Sliding window: Mistral uses `sliding_window` (null = none); the Qwen
  // family writes a window size but only uses it when `use_sliding_window`.
  std::optional<int64_t> window;
  if (c.contains("sliding_window") && !c["sliding_window"].is_null())
    window = int_field(c, "sliding_window", origin, 1, kMaxVocab * 1024);
  const bool qwen = m.arch == Architecture::kQwen2 || m.arch == Architecture::kQwen3 ||
                    m.arch == Architecture::kQwen3Moe;
  if (qwen) {
    if (optional<bool>(c, "use_sliding_window", origin).value_or(false)) {
      if (!window) throw Error(origin + ": use_sliding_window is true but sliding_window is null");
      m.sliding_window = window;
      m.sliding_window_from_layer =
          static_cast<int>(int_field(c, "max_window_layers", origin, 0, kMaxLayers, 0));
    }
  } else if (m.arch == Architecture::kMistral || m.arch == Architecture::kMixtral) {
    m.sliding_window = window;
  }

  // transformers 5 writes the attention kind of every layer; it must be what
  // the window fields above give, layer by layer.
  if (const auto lt = c.find("layer_types"); lt != c.end() && !lt->is_null()) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(m.num_hidden_layers))
      throw Error(origin + ": field 'layer_types' must list one attention kind per layer (" +
                  std::to_string(m.num_hidden_layers) + "), got " + lt->dump());
    for (int l = 0; l < m.num_hidden_layers; ++l) {
      const json& t = (*lt)[static_cast<size_t>(l)];
      if (t != "full_attention" && t != "sliding_attention")
        throw Error(origin + ": field 'layer_types' has " + t.dump() + " for layer " + std::to_string(l) +
                    "; fp8lm implements full_attention and sliding_attention");
      const bool sliding = m.sliding_window && l >= m.sliding_window_from_layer;
      if ((t == "sliding_attention") != sliding)
        throw Error(origin + ": field 'layer_types' has " + t.dump() + " for layer " + std::to_string(l) +
                    " but sliding_window / use_sliding_window / max_window_layers give " +
                    (sliding ? "sliding_attention" : "full_attention"));
    }
  }

  if (m.arch == Architecture::kQwen3Moe || m.arch == Architecture::kMixtral) {
    // Qwen3-MoE writes `num_experts`, Mixtral `num_local_experts`; transformers 5
    // writes `num_local_experts` for both.
    std::string experts_key = m.arch == Architecture::kMixtral ? "num_local_experts" : "num_experts";
    if (!c.contains(experts_key) || c[experts_key].is_null())
      experts_key = experts_key == "num_experts" ? "num_local_experts" : "num_experts";
    if (!c.contains(experts_key) || c[experts_key].is_null())
      throw Error(origin + ": required field '" + std::string(m.arch == Architecture::kMixtral
                                                                   ? "num_local_experts"
                                                                   : "num_experts") + "' is missing");
    m.moe.num_experts = static_cast<int>(int_field(c, experts_key, origin, 1, kMaxExperts));
    m.moe.num_experts_per_tok =
        static_cast<int>(int_field(c, "num_experts_per_tok", origin, 1, m.moe.num_experts));
    if (m.arch == Architecture::kMixtral) {
      m.moe.norm_topk_prob = true;  // Mixtral always renormalises its top-2
    } else {
      m.moe.moe_intermediate_size = int_field(c, "moe_intermediate_size", origin, 1, kMaxWidth);
      m.moe.norm_topk_prob = optional<bool>(c, "norm_topk_prob", origin).value_or(false);
      m.moe.decoder_sparse_step =
          static_cast<int>(int_field(c, "decoder_sparse_step", origin, 1, kMaxLayers, 1));
      const auto it = c.find("mlp_only_layers");
      if (it != c.end() && !it->is_null()) {
        if (!it->is_array()) throw Error(origin + ": field 'mlp_only_layers' must be a list of layer indices");
        for (const json& v : *it) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= m.num_hidden_layers)
            throw Error(origin + ": field 'mlp_only_layers' has an entry that is not a layer index in [0, " +
                        std::to_string(m.num_hidden_layers) + "): " + v.dump());
          m.moe.mlp_only_layers.push_back(v.get<int>());
        }
      }
    }
  }
  if (m.arch == Architecture::kDeepseekV3) parse_deepseek_v3(c, origin, m);
  // A dense MLP exists on every layer of a dense model and on the dense layers
  // of a Qwen3-MoE model; Mixtral's intermediate_size is each expert's width.
  bool needs_dense = !m.is_moe() || m.arch == Architecture::kMixtral;
  for (int l = 0; !needs_dense && l < m.num_hidden_layers; ++l) needs_dense = !m.is_moe_layer(l);
  const std::optional<int64_t> no_default;
  m.intermediate_size = int_field(c, "intermediate_size", origin, 1, kMaxWidth,
                                  needs_dense ? no_default : std::optional<int64_t>(0));
  if (m.arch == Architecture::kMixtral) m.moe.moe_intermediate_size = m.intermediate_size;

  m.bos_token_ids = parse_token_ids(c, "bos_token_id", origin);
  m.eos_token_ids = parse_token_ids(c, "eos_token_id", origin);
  for (int64_t id : m.bos_token_ids)
    if (id >= m.vocab_size) throw Error(origin + ": bos_token_id " + std::to_string(id) + " is not below vocab_size");
  for (int64_t id : m.eos_token_ids)
    if (id >= m.vocab_size) throw Error(origin + ": eos_token_id " + std::to_string(id) + " is not below vocab_size");
  m.dtype = parse_dtype(c, origin);
  return m;
}

ModelConfig read_model_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "config.json";
  return parse_model_config(read_json_file(path), path.string());
}

}  // namespace fp8lm::io
