#include "quantize/compressed_tensors_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "common/error.h"
#include "io/atomic_file.h"
#include "io/json_file.h"
#include "io/module_pattern.h"
#include "io/safetensors_writer.h"
#include "numerics/fp8_format.h"
#include "spec/model_tensors.h"
#include "weights/element_type_maps.h"
#include "weights/quantize_weight.h"

namespace fp8lm::quantize {
namespace {

using io::DType;
using nlohmann::json;

constexpr float kE4M3Max = 448.0f;
// The compressed-tensors version whose serialization the config block follows
// (tests/fixtures/quantize/README.md lists the version-dependent fields).
constexpr const char* kCompressedTensorsVersion = "0.19.0";

// One QuantizationArgs object, every key spelled out (compressed-tensors
// forbids unknown keys and readers treat each as optional, so all are written).
json args(const char* strategy, bool dynamic, const char* observer, json group_size = nullptr,
          json block_structure = nullptr) {
  return {{"actorder", nullptr},   {"block_structure", std::move(block_structure)},
          {"dynamic", dynamic},    {"group_size", std::move(group_size)},
          {"num_bits", 8},         {"observer", observer == nullptr ? json(nullptr) : json(observer)},
          {"observer_kwargs", json::object()}, {"scale_dtype", nullptr},
          {"strategy", strategy},  {"symmetric", true},
          {"type", "float"},       {"zp_dtype", nullptr}};
}

// The scale tensors' element type: the model's dtype (compressed-tensors keeps
// scales in the dtype of the weight they belong to).
DType scale_dtype(DType weight) { return weight == DType::kF32 ? DType::kF32 : DType::kBF16; }

void put_scale(float s, DType dtype, std::byte* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, &s, 4);
  } else {
    const uint16_t b = float_to_bf16(s);
    std::memcpy(out, &b, 2);
  }
}

// A static scale from a calibrated range, as the observer computes it: amax / 448 in
// the scale's dtype (float32 division, then rounded to BF16 for a BF16 model), a
// zero scale replaced by that dtype's eps.
float static_scale(float amax, DType dtype) {
  float s = amax / kE4M3Max;
  if (dtype == DType::kBF16) s = round_to_bf16(s);
  if (s == 0.0f) s = dtype == DType::kBF16 ? 0x1p-7f : 0x1p-23f;
  return s;
}

bool copied_beside_weights(const std::string& file) {
  for (const char* prefix : {"tokenizer", "special_tokens_map", "generation_config", "chat_template", "added_tokens",
                             "vocab", "merges", "preprocessor_config"})
    if (file.rfind(prefix, 0) == 0) return true;
  return false;
}

// The temporary output directory: removed unless committed.
class StagingDir {
 public:
  explicit StagingDir(const std::filesystem::path& out)
      : out_(out), path_(out.parent_path() / ("." + out.filename().string() + ".fp8lm-partial-" +
                                              std::to_string(::getpid()))) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (!std::filesystem::create_directory(path_, ec) || ec)
      throw Error(out_.string() + ": cannot create the temporary output directory '" + path_.string() +
                  "': " + (ec ? ec.message() : "it already exists"));
  }
  ~StagingDir() {
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::filesystem::path& path() const { return path_; }
  void commit() {
    // symlink_status: a dangling link "exists" too, and rename would fail on it.
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(out_, ec)))
      throw Error(out_.string() + ": appeared while quantizing; not overwritten");
    std::filesystem::rename(path_, out_, ec);
    if (ec) throw Error(out_.string() + ": cannot move the finished output into place: " + ec.message());
    committed_ = true;
  }

 private:
  std::filesystem::path out_, path_;
  bool committed_ = false;
};

// Where a linear module comes in the model's named_modules() order as LLM
// Compressor 0.14 (transformers 5.17) builds it, the order compressed-tensors
// lists unquantized modules in `ignore` (tests/fixtures/quantize/README.md):
// layer by layer, attention (q, k, v, o; MLA's q_a, q_b or q, kv_a, kv_b, o)
// before the MLP; an MoE block's experts before its router (transformers'
// Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock / DeepseekV3MoE define
// `experts` first), each expert as LLM Compressor unpacks it: up, gate, down;
// DeepSeek's shared experts after the router (DeepseekV3MoE defines them last);
// lm_head last. linear_modules lists experts in checkpoint order (gate, down,
// up), the router first and the shared experts last, so the order is rebuilt here.
std::tuple<int, int, int, int> module_order(const LinearModule& m) {
  if (m.kind == LinearKind::kLmHead) return {INT32_MAX, 0, 0, 0};
  const auto ends = [&m](std::string_view a, std::string_view b) { return m.name.ends_with(a) || m.name.ends_with(b); };
  switch (m.kind) {
    case LinearKind::kExpert:
      return {m.layer, 1, m.expert, ends("up_proj", "w3") ? 0 : ends("gate_proj", "w1") ? 1 : 2};
    case LinearKind::kRouter:
      return {m.layer, 2, 0, 0};
    default:
      // Attention, a dense MLP and the shared experts (gate, up, down): linear_modules' order is the model's.
      if (m.name.find(".shared_experts.") != std::string::npos) return {m.layer, 3, 0, 0};
      return {m.layer, m.kind == LinearKind::kAttention ? 0 : 1, 0, 0};
  }
}

// BF16 values widened to float32 (exact).
std::vector<std::byte> bf16_to_f32(std::span<const std::byte> b) {
  std::vector<std::byte> out(b.size() * 2);
  for (size_t i = 0; i < b.size() / 2; ++i) {
    uint16_t v;
    std::memcpy(&v, b.data() + 2 * i, 2);
    const float f = bf16_to_float(v);
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

}  // namespace

Preset parse_preset(std::string_view n) {
  if (n == "FP8_DYNAMIC") return Preset::kFp8Dynamic;
  if (n == "FP8") return Preset::kFp8;
  if (n == "FP8_BLOCK") return Preset::kFp8Block;
  throw Error("--scheme: '" + std::string(n) + "' is not one of FP8_DYNAMIC, FP8, FP8_BLOCK");
}

std::string_view name(Preset p) {
  switch (p) {
    case Preset::kFp8Dynamic: return "FP8_DYNAMIC";
    case Preset::kFp8: return "FP8";
    case Preset::kFp8Block: return "FP8_BLOCK";
  }
  return "?";
}

bool needs_calibration(Preset p) { return p == Preset::kFp8; }

LinearQuantScheme preset_scheme(Preset p) {
  LinearQuantScheme s;
  s.quantized = true;
  switch (p) {
    case Preset::kFp8Dynamic:
      s.weight_scales = ScaleLayout::channel();
      s.activation = ActivationQuant::kDynamicToken;
      break;
    case Preset::kFp8:
      s.weight_scales = ScaleLayout::tensor();
      s.activation = ActivationQuant::kStaticTensor;
      break;
    case Preset::kFp8Block:
      s.weight_scales = ScaleLayout::block(128, 128);
      s.activation = ActivationQuant::kDynamicGroup;
      s.activation_group = 128;
      break;
  }
  return s;
}

json quantization_config(const QuantizeOptions& o, const std::vector<std::string>& ignore) {
  json weights, input;
  switch (o.preset) {
    case Preset::kFp8Dynamic:
      weights = args("channel", false, "memoryless_minmax");
      input = args("token", true, nullptr);
      break;
    case Preset::kFp8:
      weights = args("tensor", false, "memoryless_minmax");
      input = args("tensor", false, "static_minmax");
      break;
    case Preset::kFp8Block:
      weights = args("block", false, "memoryless_minmax", nullptr, json::array({128, 128}));
      input = args("group", true, nullptr, 128);
      break;
  }
  json group = {{"format", "float-quantized"},
                {"input_activations", input},
                {"output_activations", nullptr},
                {"targets", json::array({"Linear"})},
                {"weights", weights}};
  return {{"config_groups", {{"group_0", group}}},
          {"format", "float-quantized"},
          {"global_compression_ratio", nullptr},
          {"ignore", ignore},
          {"kv_cache_scheme", o.kv_cache_fp8 ? args("tensor", false, "memoryless_minmax") : json(nullptr)},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"},
          {"sparsity_config", json::object()},
          {"transform_config", json::object()},
          {"version", kCompressedTensorsVersion}};
}

void check_supported(const io::ModelSpec& src, const QuantizeOptions& o) {
  // Every preset runs on every architecture fp8lm loads but DeepSeek-V3's static ones: MoE static
  // scales come from a calibration that observes every expert (LlamaModel::observe_all_experts),
  // and a missing range is refused by module name when writing. DeepSeek-V3 (MLA) in FP8_DYNAMIC /
  // FP8_BLOCK is LLM Compressor's output byte for byte (tests/fixtures/quantize/deepseek_*). Its
  // calibrated outputs are not: LLM Compressor 0.14 runs both on DeepSeek-V3 (checked: it writes
  // an input_scale for every MLA projection, and k_scale / v_scale), but fp8lm's calibration does
  // not observe q_b_proj's and kv_b_proj's inputs, and MLA caches a latent, not K and V.
  if (!src.config.is_mla()) return;
  if (o.preset == Preset::kFp8)
    throw Error("quantize: --scheme FP8 (static activation scales) is not supported for " + src.config.architecture +
                " (issue 45): LLM Compressor calibrates an input scale for every MLA projection, but fp8lm's "
                "calibration does not observe the inputs of q_b_proj (q_a_layernorm's output) and kv_b_proj (the "
                "normalised latent) yet, so its scales could not match; use FP8_DYNAMIC or FP8_BLOCK");
  if (o.kv_cache_fp8)
    throw Error("quantize: --kv-cache-dtype fp8 is not supported for " + src.config.architecture +
                " (issue 45): LLM Compressor's k_scale / v_scale scale the per-head K and V that transformers "
                "caches after kv_b_proj, while MLA caches one latent a token; fp8lm calibrates its FP8 latent "
                "cache at load (--kv-cache-dtype fp8 when serving)");
}

QuantizeSummary write_compressed_tensors(const io::ModelSpec& src, const std::filesystem::path& out,
                                         const QuantizeOptions& o, const calibration::CalibrationStats* calibration,
                                         const WriteProgress& progress) {
  const ModelConfig& c = src.config;
  if (std::filesystem::exists(std::filesystem::symlink_status(out)))
    throw Error(out.string() + ": already exists (fp8lm quantize never overwrites; choose a new --out)");
  if (src.quantization.serialized())
    throw Error(src.directory.string() + ": already quantized (" + src.quantization.format +
                "); fp8lm quantize starts from a BF16 or float32 checkpoint");
  check_supported(src, o);
  if ((needs_calibration(o.preset) || o.kv_cache_fp8) && calibration == nullptr)
    throw Error(std::string("quantize: ") + (o.kv_cache_fp8 ? "--kv-cache-dtype fp8" : "--scheme FP8") +
                " needs calibration data (--calib FILE)");

  std::vector<io::ModulePattern> ignore_patterns;
  for (const std::string& p : o.ignore)
    ignore_patterns.emplace_back(p, io::PatternStyle::kCompressedTensors, "--ignore");

  const LinearQuantScheme scheme = preset_scheme(o.preset);
  QuantizeSummary summary;
  struct Target {
    const io::LinearLayerSpec* layer;
    DType weight_dtype;
  };
  std::map<std::string, Target> targets;  // by weight tensor name
  // A layer's experts run as one block with one scheme (loader::check_supported),
  // so --ignore keeps all of a layer's experts or none: the first expert of each
  // layer, and whether it is kept, to name a split.
  std::map<int, std::pair<const std::string*, bool>> first_expert;
  for (const io::LinearLayerSpec& l : src.linears) {
    const std::string& m = l.module.name;
    bool keep = l.module.kind == LinearKind::kLmHead || l.module.kind == LinearKind::kRouter;
    for (const io::ModulePattern& p : ignore_patterns) keep = keep || p.matches(m);
    if (l.module.kind == LinearKind::kExpert) {
      const auto [first, inserted] = first_expert.try_emplace(l.module.layer, &m, keep);
      if (!inserted && first->second.second != keep) {
        const std::string& kept = keep ? m : *first->second.first;
        const std::string& quantized = keep ? *first->second.first : m;
        throw Error("--ignore keeps " + kept + " in " + std::string(name(c.dtype)) + " but not " + quantized +
                    ": fp8lm runs the experts of layer " + std::to_string(l.module.layer) +
                    " as one block with one scheme, so ignore all of them (e.g. 're:model\\.layers\\." +
                    std::to_string(l.module.layer) + "\\." + (c.mixtral_naming() ? "block_sparse_moe" : "mlp") +
                    "\\.experts\\..*') or none");
      }
    }
    if (keep) {
      summary.kept.push_back(m);
      continue;
    }
    const DType d = src.files->tensor(l.weight_name).dtype;
    if (d != DType::kBF16 && d != DType::kF32)
      throw Error(src.directory.string() + ": tensor '" + l.weight_name + "' is " + std::string(io::dtype_name(d)) +
                  "; fp8lm quantize reads BF16 or float32 weights");
    if (needs_calibration(o.preset) && (!calibration->input_amax.count(m)))
      throw Error("quantize: calibration recorded no input range for '" + m + "'");
    targets[l.weight_name] = {&l, d};
    summary.quantized.push_back(m);
  }
  // A tied lm_head is a Linear in the model too, the model's last module.
  if (c.tie_word_embeddings) summary.kept.push_back("lm_head");
  // config.json's `ignore` is what compressed-tensors computes from the model,
  // not the recipe's list: the name of every Linear left unquantized, in the
  // model's module order (routers by name, lm_head last; checked against LLM
  // Compressor's own MoE checkpoint, tests/fixtures/checkpoints/ct_fp8_block_qwen3_moe).
  std::vector<std::pair<std::tuple<int, int, int, int>, std::string>> ordered;
  for (const io::LinearLayerSpec& l : src.linears)
    if (std::find(summary.kept.begin(), summary.kept.end(), l.module.name) != summary.kept.end())
      ordered.emplace_back(module_order(l.module), l.module.name);
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> ignore_list;
  for (auto& [key, module] : ordered) ignore_list.push_back(std::move(module));
  if (c.tie_word_embeddings) ignore_list.push_back("lm_head");

  // The scale grid of each target, computed once and shared by the scale
  // tensor and the codes (written in whichever order the file layout puts them).
  auto weight_view = [&](const Target& t) {
    const std::span<const std::byte> b = src.files->bytes(t.layer->weight_name);
    const int64_t n = t.layer->module.out_features, k = t.layer->module.in_features;
    return t.weight_dtype == DType::kBF16 ? MatrixView::bf16(reinterpret_cast<const uint16_t*>(b.data()), n, k)
                                          : MatrixView::f32(reinterpret_cast<const float*>(b.data()), n, k);
  };
  // The weights' quantizer (weights::quantize_weight's spec) in two phases:
  // the file order may put the scale tensor before the codes.
  auto spec_of = [&](const Target& t) {
    return weights::weight_quant_spec(scheme, high_precision(*element_type(t.weight_dtype)));
  };
  auto scales = std::make_shared<std::map<std::string, std::vector<float>>>();
  auto scales_of = [&, scales](const Target& t) -> const std::vector<float>& {
    auto it = scales->find(t.layer->weight_name);
    if (it == scales->end()) it = scales->emplace(t.layer->weight_name, compute_scales(weight_view(t), spec_of(t))).first;
    return it->second;
  };

  // DeepSeek-V3's multi-token-prediction layers are not written: transformers does not load them,
  // so LLM Compressor's output has none (tests/fixtures/quantize/deepseek_v3_no_q_lora_FP8_BLOCK).
  const std::vector<std::string> mtp = c.is_mla() ? mtp_layer_prefixes(c) : std::vector<std::string>{};
  // The router's e_score_correction_bias is a float32 buffer in transformers, so LLM Compressor
  // writes it in float32 whatever the checkpoint held (BF16 widened exactly).
  std::set<std::string> router_biases;
  if (c.moe.correction_bias)
    for (int l = 0; l < c.num_hidden_layers; ++l)
      if (c.is_moe_layer(l)) router_biases.insert(moe_tensor_names(c, l).router_bias);
  std::map<std::string, std::vector<std::byte>> widened;  // outlives the write below

  std::vector<io::TensorToWrite> tensors;
  for (const std::string& name : src.files->tensor_names()) {
    const io::TensorInfo& info = src.files->tensor(name);
    if (std::any_of(mtp.begin(), mtp.end(), [&name](const std::string& p) { return name.starts_with(p); })) {
      summary.dropped.push_back(name);
      continue;
    }
    const auto target = targets.find(name);
    if (target == targets.end()) {
      if (router_biases.count(name) && info.dtype != DType::kF32) {
        if (info.dtype != DType::kBF16)
          throw Error(src.directory.string() + ": tensor '" + name + "' is " + std::string(io::dtype_name(info.dtype)) +
                      "; fp8lm quantize reads BF16 or float32 weights");
        const std::vector<std::byte>& f = widened[name] = bf16_to_f32(src.files->bytes(name));
        tensors.push_back({name, DType::kF32, info.shape, std::span<const std::byte>(f), {}});
        continue;
      }
      tensors.push_back({name, info.dtype, info.shape, src.files->bytes(name), {}});
      continue;
    }
    const Target t = target->second;
    const io::LinearLayerSpec& l = *t.layer;
    const auto n = uint64_t(l.module.out_features), k = uint64_t(l.module.in_features);
    const DType sd = scale_dtype(t.weight_dtype);
    tensors.push_back({name, DType::kF8_E4M3, {n, k}, {}, [&, t](std::span<std::byte> dst) {
                         const QuantizedMatrix q = quantize_static(weight_view(t), spec_of(t), scales_of(t));
                         std::memcpy(dst.data(), q.codes.data(), q.codes.size());
                         scales->erase(t.layer->weight_name);
                       }});
    const ScaleLayout& layout = scheme.weight_scales;
    const std::vector<uint64_t> scale_shape =
        layout.granularity == Granularity::kTensor    ? std::vector<uint64_t>{1}
        : layout.granularity == Granularity::kChannel ? std::vector<uint64_t>{n, 1}
                                                      : std::vector<uint64_t>{uint64_t(layout.scale_rows(int64_t(n))),
                                                                              uint64_t(layout.scale_cols(int64_t(k)))};
    tensors.push_back({l.module.name + ".weight_scale", sd, scale_shape, {}, [&, t, sd](std::span<std::byte> dst) {
                         const std::vector<float>& s = scales_of(t);
                         const size_t width = io::dtype_bits(sd) / 8;
                         for (size_t i = 0; i < s.size(); ++i) put_scale(s[i], sd, dst.data() + i * width);
                       }});
    if (scheme.activation == ActivationQuant::kStaticTensor) {
      const float s = static_scale(calibration->input_amax.at(l.module.name), sd);
      tensors.push_back({l.module.name + ".input_scale", sd, {1}, {}, [s, sd](std::span<std::byte> dst) {
                           put_scale(s, sd, dst.data());
                         }});
    }
  }
  if (o.kv_cache_fp8) {
    const DType sd = scale_dtype(dtype(element_type(c.dtype)));
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
      const float ks = static_scale(calibration->k_amax.at(size_t(i)), sd);
      const float vs = static_scale(calibration->v_amax.at(size_t(i)), sd);
      tensors.push_back({p + "k_scale", sd, {1}, {}, [ks, sd](std::span<std::byte> d) { put_scale(ks, sd, d.data()); }});
      tensors.push_back({p + "v_scale", sd, {1}, {}, [vs, sd](std::span<std::byte> d) { put_scale(vs, sd, d.data()); }});
    }
  }
  if (progress) {
    const size_t total = tensors.size();
    auto done = std::make_shared<size_t>(0);
    for (io::TensorToWrite& t : tensors) {
      auto inner = std::move(t.produce);
      const std::span<const std::byte> data = t.data;
      const std::string tensor_name = t.name;
      t.produce = [inner, data, tensor_name, done, total, &progress](std::span<std::byte> dst) {
        if (inner) inner(dst);
        else std::memcpy(dst.data(), data.data(), data.size());
        progress(tensor_name, ++*done, total);
      };
    }
  }

  StagingDir staging(out);
  const io::ShardedWriteResult written = io::write_sharded_safetensors(staging.path(), tensors);
  summary.tensor_bytes = written.total_size;

  json config = io::read_json_file(src.directory / "config.json");
  config["quantization_config"] = quantization_config(o, ignore_list);
  {
    io::AtomicFile f(staging.path() / "config.json");
    // As compressed-tensors re-dumps it: sorted keys, indent 2, ASCII escapes, no final newline.
    const std::string text = config.dump(2, ' ', /*ensure_ascii=*/true);
    f.write(std::as_bytes(std::span(text.data(), text.size())));
    f.finish();
    f.commit();
  }
  for (const auto& e : std::filesystem::directory_iterator(src.directory)) {
    const std::string file = e.path().filename().string();
    if (e.is_regular_file() && copied_beside_weights(file))
      if (std::error_code ec; !std::filesystem::copy_file(e.path(), staging.path() / file, ec) || ec)
        throw Error((staging.path() / file).string() + ": cannot copy " + e.path().string() + ": " + ec.message());
  }
  staging.commit();
  return summary;
}

}  // namespace fp8lm::quantize
