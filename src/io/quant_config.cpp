#include "io/quant_config.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "io/json_file.h"
#include "io/quant_formats.h"

namespace fp8lm::io {
namespace {

using nlohmann::json;

constexpr const char* kSupported = "none, fp8, compressed-tensors, modelopt, fbgemm_fp8";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string_view last_component(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ModelOpt checkpoints without a quantization block in config.json carry the
// description in hf_quant_config.json beside it.
CheckpointQuantization read_hf_quant_config(const std::filesystem::path& path) {
  const json doc = read_json_file(path);
  if (!doc.is_object()) throw Error(path.string() + ": expected a JSON object");
  CheckpointQuantization q = detail::parse_modelopt(doc, path.string());
  q.source = path.string();
  return q;
}

bool is_modelopt_block(const json& qc) {
  // vLLM also treats {"producer": {"name": "modelopt"}, "quantization": {...}} as modelopt.
  const auto p = qc.find("producer");
  return p != qc.end() && p->is_object() && p->contains("name") && (*p)["name"].is_string() &&
         lower((*p)["name"].get<std::string>()) == "modelopt" && qc.contains("quantization");
}

}  // namespace

std::string supported_quantization_formats() { return kSupported; }

bool never_quantized(std::string_view module) {
  const std::string_view last = last_component(module);
  if (last == "lm_head" || last == "embed_tokens" || ends_with(last, "norm") || ends_with(last, "layernorm"))
    return true;
  // MoE routers: Qwen3-MoE `mlp.gate`, Mixtral `block_sparse_moe.gate`.
  return last == "gate" && (ends_with(module, ".mlp.gate") || ends_with(module, ".block_sparse_moe.gate"));
}

LinearQuantScheme CheckpointQuantization::scheme_for(std::string_view module) const {
  const LinearQuantScheme unquantized;
  if (never_quantized(module)) return unquantized;
  for (const ModulePattern& p : keep_high_precision)
    if (p.matches(module)) return unquantized;
  for (const ModulePattern& p : ignore)
    if (p.matches(module)) return unquantized;
  // compressed-tensors resolves overlapping groups by specificity: an exact
  // name beats a regex, which beats a class name; the first group breaks ties.
  const QuantRule* best = nullptr;
  int best_rank = 0;
  for (const QuantRule& r : rules)
    for (const ModulePattern& t : r.targets) {
      const int rank = t.match_rank(module);
      if (rank > best_rank) {
        best_rank = rank;
        best = &r;
      }
    }
  return best ? best->scheme : unquantized;
}

std::string CheckpointQuantization::describe() const {
  std::string s = format;
  if (!variant.empty()) s += " (" + variant + ")";
  if (online) s += ", quantized online";
  for (const QuantRule& r : rules) s += "; " + r.name + ": " + r.scheme.describe();
  if (!ignore.empty()) {
    s += "; not quantized:";
    for (const ModulePattern& p : ignore) s += " " + p.text();
  }
  if (!keep_high_precision.empty()) {
    s += "; kept in high precision:";
    for (const ModulePattern& p : keep_high_precision) s += " " + p.text();
  }
  if (fp8_embeddings) s += "; embeddings and lm_head: fp8-e4m3 per row (weight-only)";
  s += "; kv cache: " + std::string(name(kv_cache.dtype));
  return s;
}

CheckpointQuantization parse_quantization(const json& config, const std::filesystem::path& model_dir) {
  const std::string config_path = (model_dir / "config.json").string();
  if (!config.is_object()) throw Error(config_path + ": expected a JSON object");

  // compressed-tensors files from before Oct 2024 used `compression_config`.
  std::string key = "quantization_config";
  if ((!config.contains(key) || config[key].is_null()) && config.contains("compression_config") &&
      !config["compression_config"].is_null())
    key = "compression_config";
  const auto it = config.find(key);
  const std::filesystem::path hf_quant = model_dir / "hf_quant_config.json";

  if (it == config.end() || it->is_null()) {
    if (!model_dir.empty() && std::filesystem::is_regular_file(hf_quant)) return read_hf_quant_config(hf_quant);
    CheckpointQuantization none;
    none.source = config_path;
    return none;
  }
  const std::string where = config_path + ": " + key;
  if (!it->is_object()) throw Error(where + " must be an object, got " + it->type_name());
  const json& qc = *it;

  std::optional<std::string> method = optional<std::string>(qc, "quant_method", where);
  if (!method && is_modelopt_block(qc)) method = "modelopt";
  if (!method)
    throw Error(where + ": required field 'quant_method' is missing (fp8lm reads: " + std::string(kSupported) + ")");
  const std::string m = lower(*method);

  CheckpointQuantization q;
  if (m == "fp8") {
    q = detail::parse_hf_fp8(qc, where);
  } else if (m == "compressed-tensors") {
    q = detail::parse_compressed_tensors(qc, where);
  } else if (m == "modelopt" || is_modelopt_block(qc)) {
    // The flat block may omit quant_algo when hf_quant_config.json has it.
    const bool has_algo = qc.contains("quant_algo") || qc.contains("quantization");
    if (!has_algo && !model_dir.empty() && std::filesystem::is_regular_file(hf_quant))
      return read_hf_quant_config(hf_quant);
    q = detail::parse_modelopt(qc, where);
  } else if (m == "fbgemm_fp8") {
    q = detail::parse_fbgemm_fp8(qc, where);
  } else {
    throw Error(where + ": quantization format '" + *method + "' is not supported; fp8lm reads " +
                std::string(kSupported) + " (FP8 checkpoints only)");
  }
  q.source = config_path;
  return q;
}

}  // namespace fp8lm::io
