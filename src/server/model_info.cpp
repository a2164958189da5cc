#include "server/model_info.h"

#include <algorithm>
#include <charconv>
#include <system_error>
#include <map>
#include <utility>
#include <vector>

#include "backend/paged_kv_types.h"
#include "io/model_spec.h"
#include "spec/quant_scheme.h"
#include "weights/element_type.h"

namespace fp8lm::server {
namespace {

// A float as the shortest decimal that reads back as it (0.8f is 0.8, not 0.800000011920929).
double shortest(float f) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  return ec == std::errc() ? std::stod(std::string(buf, end)) : double(f);
}

std::string reasoning_name(ReasoningParser p) {
  switch (p) {
    case ReasoningParser::kNone: return "none";
    case ReasoningParser::kQwen3: return "qwen3";
    case ReasoningParser::kDeepSeekR1: return "deepseek_r1";
  }
  return "?";
}

std::string tool_parser_name(ToolCallParser p) {
  switch (p) {
    case ToolCallParser::kNone: return "none";
    case ToolCallParser::kHermes: return "hermes";
    case ToolCallParser::kLlama3Json: return "llama3_json";
    case ToolCallParser::kQwen3: return "qwen3";
  }
  return "?";
}

// The linear layers by scheme, in checkpoint order: [{scheme, count, modules: [patterns]}].
Json linear_groups(const io::ModelSpec& spec) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // scheme -> patterns
  std::vector<int64_t> counts;
  for (const io::LinearLayerSpec& l : spec.linears) {
    const std::string scheme = l.scheme.describe();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == scheme; });
    if (it == groups.end()) {
      groups.push_back({scheme, {}});
      counts.push_back(0);
      it = groups.end() - 1;
    }
    ++counts[size_t(it - groups.begin())];
    const std::string pattern = io::module_family(l.module.name);
    if (std::find(it->second.begin(), it->second.end(), pattern) == it->second.end()) it->second.push_back(pattern);
  }
  Json out = Json::array();
  for (size_t i = 0; i < groups.size(); ++i)
    out.push_back(Json{{"scheme", groups[i].first}, {"count", counts[i]}, {"modules", groups[i].second}});
  return out;
}

// The KV cache as it runs: each element type with its layer count, and the scales' range.
Json kv_cache_json(const engine::Runtime& rt, const ServedModelFacts& f) {
  const KvCacheScheme& kv = rt.spec().kv_cache();
  const std::vector<backend::KvLayerFormat> formats = rt.kv_formats();
  std::map<std::string, int64_t> elements;
  std::vector<float> k, v;
  for (const backend::KvLayerFormat& l : formats) {
    ++elements[std::string(name(l.element))];
    if (is_fp8(l.element)) {
      k.push_back(l.k_scale);
      v.push_back(l.v_scale);
    }
  }
  const auto range = [](const std::vector<float>& s) {
    if (s.empty()) return Json(nullptr);
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    return Json::array({shortest(*lo), shortest(*hi)});
  };
  Json layers = Json::object();
  for (const auto& [element, count] : elements) layers[element] = count;
  return Json{{"dtype", std::string(name(kv.dtype))},
              {"layers", std::move(layers)},
              {"k_scale", range(k)},
              {"v_scale", range(v)},
              {"scales_from_checkpoint", !kv.k_scale_name.empty()},
              {"skip_layers", kv.skip_layers},
              {"tokens", f.kv_cache_tokens},
              {"bytes", rt.kv_cache_bytes()}};
}

}  // namespace

Json model_info_json(const engine::Runtime& rt, const ServedModelFacts& f) {
  const io::ModelSpec& spec = rt.spec();
  const ModelConfig& c = spec.config;
  const io::MemoryEstimate m = io::estimate_memory(spec);
  Json j = Json::object();
  j["object"] = "fp8lm.model";
  j["id"] = f.served_model_name;
  j["root"] = spec.directory.string();
  j["architecture"] = c.architecture;
  j["model_type"] = c.model_type;
  j["dtype"] = std::string(name(c.dtype));
  j["parameters"] = spec.parameter_count;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["hidden_size"] = c.hidden_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["max_model_len"] = f.max_model_len;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["device"] = rt.backend_name();
  j["load_format"] = spec.dummy_weights ? "dummy" : "auto";
  j["quantization"] = Json{{"format", spec.quantization.format},
                           {"variant", spec.quantization.variant},
                           {"online", spec.quantization.online},
                           {"fp8_embeddings", spec.quantization.fp8_embeddings},
                           {"description", spec.quantization.describe()}};
  j["linear_groups"] = linear_groups(spec);
  j["kv_cache"] = kv_cache_json(rt, f);
  j["memory"] = Json{{"weights_bytes", rt.weight_bytes()},
                     {"weights_bf16_bytes", m.weights_bf16},
                     {"weights_fp8_bytes", m.weights_fp8},
                     {"kv_cache_bytes_per_token_bf16", m.kv_per_token_bf16},
                     {"kv_cache_bytes_per_token_fp8", m.kv_per_token_fp8}};
  j["notes"] = rt.notes();
  j["reasoning_parser"] = reasoning_name(f.reasoning);
  j["tool_call_parser"] = tool_parser_name(f.tool_call_parser);
  const engine::SamplingParams& d = f.defaults;
  j["sampling_defaults"] = Json{{"source", f.defaults_source.empty() ? Json(nullptr) : Json(f.defaults_source)},
                                {"temperature", shortest(d.temperature)},
                                {"top_p", shortest(d.top_p)},
                                {"top_k", d.top_k},
                                {"min_p", shortest(d.min_p)},
                                {"repetition_penalty", shortest(d.repetition_penalty)}};
  return j;
}

}  // namespace fp8lm::server
