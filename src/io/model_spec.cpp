#include "io/model_spec.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "io/eagle3_config_json.h"
#include "io/json_file.h"
#include "io/model_config_json.h"

namespace fp8lm::io {
namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

using Shape = std::vector<uint64_t>;

Shape to_shape(std::initializer_list<int64_t> dims) {
  Shape s;
  for (int64_t d : dims) s.push_back(uint64_t(d));
  return s;
}

bool is_float(DType d) { return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32; }

// Checks the tensors of one checkpoint against what the architecture and the
// schemes imply, collecting every problem instead of stopping at the first.
class TensorAudit {
 public:
  explicit TensorAudit(const CheckpointFiles& files) : files_(files) {
    for (const std::string& n : files.tensor_names()) unclaimed_.insert(n);
  }

  // `name` must exist with a dtype accepted by `dtype_ok` and one of `shapes`.
  void require(const std::string& name, bool (*dtype_ok)(DType), const char* dtype_text,
               const std::vector<Shape>& shapes) {
    const TensorInfo* t = files_.find(name);
    if (t == nullptr) {
      problem("missing tensor '" + name + "' (" + dtype_text + " " + shape_text(shapes.front()) + ")");
      return;
    }
    unclaimed_.erase(name);
    if (!dtype_ok(t->dtype))
      problem("tensor '" + name + "' is " + std::string(dtype_name(t->dtype)) + ", expected " + dtype_text);
    if (std::find(shapes.begin(), shapes.end(), t->shape) == shapes.end()) {
      std::string want;
      for (const Shape& s : shapes) want += (want.empty() ? "" : " or ") + shape_text(s);
      problem("tensor '" + name + "' has shape " + shape_text(t->shape) + ", expected " + want);
    }
  }

  // Claims `name` if present (tensors that may or may not be stored).
  bool claim_if_present(const std::string& name) { return unclaimed_.erase(name) > 0; }

  void problem(std::string text) { problems_.push_back(std::move(text)); }

  const std::set<std::string>& unclaimed() const { return unclaimed_; }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  const CheckpointFiles& files_;
  std::set<std::string> unclaimed_;
  std::vector<std::string> problems_;
};

bool float_dtype(DType d) { return is_float(d); }
bool e4m3_dtype(DType d) { return d == DType::kF8_E4M3; }
bool e5m2_dtype(DType d) { return d == DType::kF8_E5M2; }

// The shapes a weight scale may have on disk for an [N, K] weight.
std::vector<Shape> weight_scale_shapes(const ScaleLayout& l, int64_t n, int64_t k) {
  switch (l.granularity) {
    case Granularity::kTensor: return {Shape{}, to_shape({1})};
    case Granularity::kChannel:
    case Granularity::kToken: return {to_shape({n, 1}), to_shape({n})};
    case Granularity::kGroup: return {to_shape({n, cdiv(k, l.group_cols)})};
    case Granularity::kBlock: return {to_shape({cdiv(n, l.group_rows), cdiv(k, l.group_cols)})};
  }
  return {};
}

int64_t weight_scale_count(const ScaleLayout& l, int64_t n, int64_t k) {
  const Shape s = weight_scale_shapes(l, n, k).back();
  int64_t c = 1;
  for (uint64_t d : s) c *= int64_t(d);
  return c;
}

std::string replace_layer(std::string pattern, int layer) {
  const std::string key = "{layer}";
  const size_t at = pattern.find(key);
  if (at != std::string::npos) pattern.replace(at, key.size(), std::to_string(layer));
  return pattern;
}

void audit_linear(TensorAudit& audit, LinearLayerSpec& l) {
  const int64_t n = l.module.out_features, k = l.module.in_features;
  const LinearQuantScheme& s = l.scheme;
  if (s.quantized && s.weights_serialized) {
    const bool e4m3 = s.weight_format == Fp8Format::kE4M3;
    audit.require(l.weight_name, e4m3 ? e4m3_dtype : e5m2_dtype, e4m3 ? "F8_E4M3" : "F8_E5M2",
                  {to_shape({n, k})});
    l.weight_scale_name = l.module.name + "." + s.weight_scale_suffix;
    audit.require(l.weight_scale_name, float_dtype, "a float scale", weight_scale_shapes(s.weight_scales, n, k));
    if (s.activation == ActivationQuant::kStaticTensor) {
      l.input_scale_name = l.module.name + "." + s.input_scale_suffix;
      audit.require(l.input_scale_name, float_dtype, "a float scale", {Shape{}, to_shape({1})});
    }
  } else {
    audit.require(l.weight_name, float_dtype, "BF16/F16/F32", {to_shape({n, k})});
  }
}

void audit_kv_scales(TensorAudit& audit, const ModelConfig& c, const KvCacheScheme& kv) {
  const std::vector<Shape> shapes = {Shape{}, to_shape({1}), to_shape({c.num_key_value_heads, 1, 1})};
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (const std::string* pattern : {&kv.k_scale_name, &kv.v_scale_name}) {
      if (pattern->empty()) continue;
      audit.require(replace_layer(*pattern, layer), float_dtype, "a float scale", shapes);
    }
  }
}

// Tensors some producers store that carry nothing fp8lm needs.
bool harmless_extra(const std::string& name, const ModelConfig& c) {
  if (name.ends_with("rotary_emb.inv_freq")) return true;  // older transformers saved it
  if (c.tie_word_embeddings && name == std::string(kLmHead) + ".weight") return true;  // a tied copy
  // DeepSeek's multi-token-prediction layers: read past (spec/model_tensors.h, mtp_layer_prefixes).
  for (const std::string& prefix : mtp_layer_prefixes(c))
    if (name.starts_with(prefix)) return true;
  // KV scales of a cache the command line asked to keep in BF16
  return name.ends_with(".k_scale") || name.ends_with(".v_scale") || name.ends_with("k_proj.output_scale") ||
         name.ends_with("v_proj.output_scale");
}

[[noreturn]] void fail(const std::filesystem::path& dir, const std::vector<std::string>& problems) {
  constexpr size_t kShown = 30;
  std::string msg = dir.string() + ": the checkpoint does not match its config (" +
                    std::to_string(problems.size()) + " problem" + (problems.size() == 1 ? "" : "s") + "):";
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += "\n  - " + problems[i];
  if (problems.size() > kShown) msg += "\n  ... and " + std::to_string(problems.size() - kShown) + " more";
  throw Error(msg);
}

}  // namespace

std::string module_family(std::string_view name) {
  std::string out;
  size_t i = 0;
  while (i < name.size()) {
    // a component made of digits only (between dots) is an index
    size_t end = name.find('.', i);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(i, end - i);
    const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    out += index ? std::string_view("*") : part;
    if (end < name.size()) out += '.';
    i = end + 1;
  }
  return out;
}


namespace {

// config.json of a model to run: an EAGLE-3 head given as the model is named as what it is.
ModelConfig model_config_of(const nlohmann::json& raw, const std::filesystem::path& config_path) {
  if (is_eagle3_config(raw))
    throw Error(config_path.string() + ": an EAGLE-3 head, not a model to run: it drafts for its target through "
                "--speculative-config '{\"method\": \"eagle3\", \"model\": DIR, \"num_speculative_tokens\": k}'");
  return parse_model_config(raw, config_path.string());
}

}  // namespace

ModelSpec read_model_spec(const std::filesystem::path& dir, const LoadOverrides& overrides) {
  if (overrides.load_format == LoadFormat::kDummy) return read_model_spec_dummy(dir, overrides);
  if (!std::filesystem::is_directory(dir))
    throw Error(dir.string() + ": not a model directory (expected config.json and safetensors files)");
  ModelSpec spec;
  spec.directory = dir;
  const std::filesystem::path config_path = dir / "config.json";
  const nlohmann::json raw = read_json_file(config_path);
  spec.config = model_config_of(raw, config_path);
  spec.quantization = parse_quantization(raw, dir);
  apply_overrides(spec.quantization, overrides, spec.config.num_hidden_layers);
  spec.files = std::make_shared<const CheckpointFiles>(dir);

  TensorAudit audit(*spec.files);
  for (const ExpectedTensor& t : expected_tensors(spec.config)) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    spec.parameter_count += numel;
    if (t.role == TensorRole::kLinearWeight) continue;  // checked with its scheme below
    Shape shape(t.shape.begin(), t.shape.end());
    audit.require(t.name, float_dtype, "BF16/F16/F32", {shape});
  }
  for (const LinearModule& m : linear_modules(spec.config)) {
    LinearLayerSpec l{m, spec.quantization.scheme_for(m.name), m.name + ".weight", "", ""};
    audit_linear(audit, l);
    spec.linears.push_back(std::move(l));
  }
  audit_kv_scales(audit, spec.config, spec.quantization.kv_cache);
  for (const std::string& name : audit.unclaimed()) {
    if (harmless_extra(name, spec.config)) continue;
    const TensorInfo& t = spec.files->tensor(name);
    audit.problem("unexpected tensor '" + name + "' (" + std::string(dtype_name(t.dtype)) + " " +
                  shape_text(t.shape) + "): not part of " + spec.config.architecture + " with " +
                  spec.quantization.describe());
  }
  if (!audit.problems().empty()) fail(dir, audit.problems());

  for (const std::string& name : spec.files->tensor_names()) {
    const TensorInfo& t = spec.files->tensor(name);
    DTypeUsage& u = spec.dtypes[std::string(dtype_name(t.dtype))];
    ++u.tensors;
    u.bytes += t.byte_size();
  }
  return spec;
}

ModelSpec read_model_spec_dummy(const std::filesystem::path& dir, const LoadOverrides& overrides) {
  if (!std::filesystem::is_directory(dir))
    throw Error(dir.string() + ": not a model directory (--load-format dummy needs a directory holding config.json)");
  const std::filesystem::path config_path = dir / "config.json";
  if (!std::filesystem::is_regular_file(config_path))
    throw Error(config_path.string() + ": no such file (--load-format dummy builds the model from config.json)");
  ModelSpec spec;
  spec.directory = dir;
  spec.dummy_weights = true;
  const nlohmann::json raw = read_json_file(config_path);
  spec.config = model_config_of(raw, config_path);
  spec.quantization = parse_quantization(raw, dir);
  // Generated weights come with no KV-cache scales: an FP8 cache is calibrated
  // at load (or uses 1.0), as for a checkpoint that stores none.
  spec.quantization.kv_cache.k_scale_name.clear();
  spec.quantization.kv_cache.v_scale_name.clear();
  apply_overrides(spec.quantization, overrides, spec.config.num_hidden_layers);
  for (const ExpectedTensor& t : expected_tensors(spec.config)) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    spec.parameter_count += numel;
  }
  for (const LinearModule& m : linear_modules(spec.config))
    spec.linears.push_back({m, spec.quantization.scheme_for(m.name), m.name + ".weight", "", ""});
  return spec;
}

MemoryEstimate estimate_memory(const ModelSpec& spec) {
  MemoryEstimate m;
  m.weights_bf16 = uint64_t(spec.parameter_count) * 2;

  // A BF16 checkpoint without --quantization: show what the default online
  // scheme would take, since that is the question a user asks.
  const bool as_is = spec.quantization.serialized() || spec.quantization.online;
  const LinearQuantScheme default_online = online_scheme(OnlineQuant::kChannelToken);
  m.fp8_scheme = as_is ? "this checkpoint's schemes"
                       : "--quantization fp8 (" + std::string(name(OnlineQuant::kChannelToken)) + ")";
  int64_t linear_params = 0;
  uint64_t fp8 = 0;
  for (const LinearLayerSpec& l : spec.linears) {
    const int64_t n = l.module.out_features, k = l.module.in_features;
    linear_params += n * k;
    const LinearQuantScheme& s = as_is ? l.scheme : (never_quantized(l.module.name) ? l.scheme : default_online);
    fp8 += s.quantized ? uint64_t(n * k) + 4 * uint64_t(weight_scale_count(s.weight_scales, n, k))
                       : 2 * uint64_t(n * k);
  }
  m.weights_fp8 = fp8 + 2 * uint64_t(spec.parameter_count - linear_params);

  const ModelConfig& c = spec.config;
  // K and V per KV head, or MLA's one latent entry a token shared by every head.
  const uint64_t per_layer = c.is_mla() ? uint64_t(c.mla.latent_width())
                                        : 2 * uint64_t(c.num_key_value_heads) * uint64_t(c.head_dim);
  m.kv_per_token_bf16 = per_layer * 2 * uint64_t(c.num_hidden_layers);
  const auto skipped = uint64_t(spec.kv_cache().skip_layers.size());
  m.kv_per_token_fp8 = per_layer * (uint64_t(c.num_hidden_layers) - skipped) + per_layer * 2 * skipped;
  if (c.is_mla())
    m.kv_per_token_gqa_bf16 = uint64_t(c.num_key_value_heads) * uint64_t(c.mla.qk_head_dim() + c.mla.v_head_dim) * 2 *
                              uint64_t(c.num_hidden_layers);
  return m;
}

}  // namespace fp8lm::io
