#include "io/eagle3_config_json.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/checkpoint_files.h"
#include "io/json_file.h"
#include "io/model_config_json.h"

namespace fp8lm::io {
namespace {

using json = nlohmann::json;

constexpr const char* kReleaseArchitecture = "LlamaForCausalLMEagle3";

bool flag(const json& c, const char* key, const std::string& origin) {
  return optional<bool>(c, key, origin).value_or(false);
}

// The decoder layer's Llama config: parse_model_config's rules, on a copy that names the class
// parse_model_config knows (the head's own class or none is not a causal LM it runs).
ModelConfig layer_config(json c, const std::string& origin) {
  const std::string type = optional<std::string>(c, "model_type", origin).value_or("llama");
  if (type != "llama")
    throw Error(origin + ": an EAGLE-3 decoder layer of model_type '" + type +
                "' is not implemented (fp8lm runs Llama layers: model_type 'llama')");
  // Llama's own config has no sliding window; a head's may (speculators' layer_types).
  if (const auto w = c.find("sliding_window"); w != c.end() && !w->is_null())
    throw Error(origin + ": sliding-window attention in an EAGLE-3 head is not implemented");
  if (const auto t = c.find("layer_types"); t != c.end() && t->is_array())
    for (const json& kind : *t)
      if (kind != "full_attention")
        throw Error(origin + ": layer type " + kind.dump() + " in an EAGLE-3 head is not implemented");
  c["architectures"] = json::array({"LlamaForCausalLM"});
  c["model_type"] = "llama";
  ModelConfig m = parse_model_config(c, origin);
  if (m.num_hidden_layers != 1)
    throw Error(origin + ": an EAGLE-3 head of " + std::to_string(m.num_hidden_layers) +
                " decoder layers is not implemented (fp8lm runs the one-layer head)");
  if (m.qkv_bias || m.o_bias || m.mlp_bias)
    throw Error(origin + ": biases in an EAGLE-3 head's layer are not implemented");
  return m;
}

}  // namespace

bool is_eagle3_config(const json& c) {
  if (!c.is_object()) return false;
  if (c.contains("speculators_model_type")) return true;
  const auto a = c.find("architectures");
  return a != c.end() && a->is_array() && !a->empty() && (*a)[0] == kReleaseArchitecture;
}

Eagle3HeadConfig parse_eagle3_config(const json& c, const std::string& origin) {
  if (!c.is_object()) throw Error(origin + ": expected a JSON object");
  Eagle3HeadConfig h;
  if (c.contains("speculators_model_type")) {
    const std::string type = required<std::string>(c, "speculators_model_type", origin);
    if (type != "eagle3")
      throw Error(origin + ": speculators model type '" + type +
                  "' is not implemented (fp8lm runs 'eagle3' heads; n-gram and draft models through "
                  "--speculative-config's other methods)");
    h.layout = Eagle3HeadConfig::Layout::kSpeculators;
    const auto it = c.find("transformer_layer_config");
    if (it == c.end() || !it->is_object())
      throw Error(origin + ": required object 'transformer_layer_config' is missing");
    h.layer = layer_config(*it, origin + " (transformer_layer_config)");
    h.norm_before_residual = flag(c, "norm_before_residual", origin);
    if (flag(c, "norm_before_fc", origin))
      throw Error(origin + ": norm_before_fc (one RMSNorm over the concatenated auxiliary states, gpt-oss heads) "
                  "is not implemented");
    h.fc_norm = flag(c, "fc_norm", origin);
    h.norm_output = flag(c, "norm_output", origin);
  } else {
    const auto a = c.find("architectures");
    if (a == c.end() || !a->is_array() || a->empty() || (*a)[0] != kReleaseArchitecture)
      throw Error(origin + ": not an EAGLE-3 head (no 'speculators_model_type', and architectures is not [\"" +
                  std::string(kReleaseArchitecture) + "\"])");
    h.layout = Eagle3HeadConfig::Layout::kEagleRelease;
    h.layer = layer_config(c, origin);
  }
  h.draft_vocab_size = required<int64_t>(c, "draft_vocab_size", origin);
  if (h.draft_vocab_size < 1 || h.draft_vocab_size > h.layer.vocab_size)
    throw Error(origin + ": field 'draft_vocab_size' (" + std::to_string(h.draft_vocab_size) +
                ") must be 1 … the target vocabulary (" + std::to_string(h.layer.vocab_size) + ")");
  h.target_hidden_size = optional<int64_t>(c, "target_hidden_size", origin).value_or(h.layer.hidden_size);
  if (h.target_hidden_size < 1 || h.target_hidden_size > (int64_t(1) << 20))
    throw Error(origin + ": field 'target_hidden_size' (" + std::to_string(h.target_hidden_size) + ") is out of range");
  if (h.layout == Eagle3HeadConfig::Layout::kSpeculators && h.target_hidden_size != h.layer.hidden_size)
    throw Error(origin + ": target_hidden_size " + std::to_string(h.target_hidden_size) + " differs from the layer's " +
                std::to_string(h.layer.hidden_size) + " (speculators' heads fuse states of the layer's width)");
  if (const auto it = c.find("eagle_aux_hidden_state_layer_ids"); it != c.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || it->size() > 16)
      throw Error(origin + ": field 'eagle_aux_hidden_state_layer_ids' must be an array naming 1 to 16 layers");
    for (const json& id : *it) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 65535)
        throw Error(origin + ": field 'eagle_aux_hidden_state_layer_ids' holds " + id.dump() + ", not a layer index");
      h.aux_layer_ids.push_back(id.get<int>());
    }
  }
  return h;
}

Eagle3Checkpoint read_eagle3_checkpoint(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  Eagle3Checkpoint out;
  out.config = parse_eagle3_config(read_json_file(config_path), config_path.string());
  const Eagle3HeadConfig& c = out.config;
  const CheckpointFiles files(dir);
  out.own_embedding = files.find("embed_tokens.weight") != nullptr;
  const std::string where = dir.string();
  for (const Eagle3Tensor& want : eagle3_tensors(c, out.own_embedding)) {
    const TensorInfo* t = files.find(want.name);
    if (t == nullptr) throw Error(where + ": the EAGLE-3 head has no tensor '" + want.name + "'");
    const std::vector<uint64_t> wanted(want.shape.begin(), want.shape.end());
    if (t->shape != wanted)
      throw Error(where + ": tensor '" + want.name + "' has shape " + shape_text(t->shape) + ", the config gives " +
                  shape_text(wanted));
    const bool ok = want.kind == Eagle3Tensor::Kind::kI64    ? t->dtype == DType::kI64
                    : want.kind == Eagle3Tensor::Kind::kBool ? t->dtype == DType::kBool
                                                             : (t->dtype == DType::kBF16 || t->dtype == DType::kF16 ||
                                                                t->dtype == DType::kF32);
    if (!ok)
      throw Error(where + ": tensor '" + want.name + "' is " + std::string(dtype_name(t->dtype)) + " (expected " +
                  (want.kind == Eagle3Tensor::Kind::kI64    ? "I64"
                   : want.kind == Eagle3Tensor::Kind::kBool ? "BOOL"
                                                            : "BF16, F16 or F32") +
                  ")");
  }
  if (c.draft_vocab_size != c.layer.vocab_size) {
    // Every draft id maps inside the target vocabulary, to distinct ids, and t2d marks exactly those.
    const std::span<const std::byte> d2t = files.bytes("d2t");
    const std::span<const std::byte> t2d = files.bytes("t2d");
    std::vector<uint8_t> reached(size_t(c.layer.vocab_size), 0);
    for (int64_t d = 0; d < c.draft_vocab_size; ++d) {
      int64_t offset = 0;
      std::memcpy(&offset, d2t.data() + d * 8, 8);
      const int64_t target = d + offset;
      out.draft_to_target.push_back(target);
      if (offset < -c.layer.vocab_size || target < 0 || target >= c.layer.vocab_size)
        throw Error(where + ": d2t maps draft id " + std::to_string(d) + " outside the target vocabulary (offset " +
                    std::to_string(offset) + ")");
      if (reached[size_t(target)]++ != 0)
        throw Error(where + ": d2t maps two draft ids to target id " + std::to_string(target));
    }
    for (int64_t t = 0; t < c.layer.vocab_size; ++t) {
      const bool marked = std::to_integer<uint8_t>(t2d[size_t(t)]) != 0;
      if (marked != (reached[size_t(t)] != 0))
        throw Error(where + ": t2d " + (marked ? "marks" : "leaves out") + " target id " + std::to_string(t) +
                    ", which d2t " + (marked ? "never reaches" : "reaches"));
    }
  } else {
    for (int64_t d = 0; d < c.draft_vocab_size; ++d) out.draft_to_target.push_back(d);
  }
  return out;
}

}  // namespace fp8lm::io
