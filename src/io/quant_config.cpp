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
