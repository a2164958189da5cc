#include "loader/host_weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <memory>

#include "common/error.h"
#include "io/mapped_file.h"
#include "loader/dummy_weights.h"

namespace fp8lm::loader {
namespace {

using io::DType;
using io::TensorInfo;

// Reads one weight or scale tensor of the checkpoint.
class TensorSource {
 public:
  explicit TensorSource(const io::ModelSpec& spec)
      : spec_(spec), owner_(std::shared_ptr<const void>(spec.files, spec.files.get())) {}

  const TensorInfo& info(const std::string& name) const { return spec_.files->tensor(name); }

  // Any float tensor as float32 values.
  std::vector<float> floats(const std::string& name) const {
    const TensorInfo& t = info(name);
    const std::span<const std::byte> b = spec_.files->bytes(name);
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16)
      throw Error(spec_.directory.string() + ": tensor '" + name + "' is " + std::string(io::dtype_name(t.dtype)) +
                  ", expected a float tensor");
    // Copied first: a file may place a tensor at any byte offset.
    std::vector<uint32_t> aligned((b.size() + 3) / 4);
    std::memcpy(aligned.data(), b.data(), b.size());
    std::vector<float> out(t.element_count());
    const cpu::WeightStorage storage = t.dtype == DType::kF32    ? cpu::WeightStorage::kF32
                                       : t.dtype == DType::kF16 ? cpu::WeightStorage::kF16
                                                                : cpu::WeightStorage::kBF16;
    cpu::select_linear_kernels(KernelChoice::kScalar).to_float(aligned.data(), storage, int64_t(out.size()), out.data());
    return out;
  }

  // A high-precision matrix as stored, pointing into the mapping (copied only
  // when the file places it at an address its element type cannot be read from).
  cpu::LinearWeights matrix(const std::string& name, int64_t n, int64_t k) const {
    const TensorInfo& t = info(name);
    const std::span<const std::byte> b = spec_.files->bytes(name);
    const cpu::WeightStorage storage = t.dtype == DType::kF32    ? cpu::WeightStorage::kF32
                                       : t.dtype == DType::kF16 ? cpu::WeightStorage::kF16
                                                                : cpu::WeightStorage::kBF16;
    const size_t width = t.dtype == DType::kF32 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(b.data()) % width == 0) {
      cpu::LinearWeights w = cpu::high_precision_weights(storage, b.data(), n, k);
      w.owner = owner_;
      return w;
    }
    auto copy = std::make_shared<std::vector<uint32_t>>((b.size() + 3) / 4);
    std::memcpy(copy->data(), b.data(), b.size());
    cpu::LinearWeights w = cpu::high_precision_weights(storage, copy->data(), n, k);
    w.owner = copy;
    return w;
  }

  std::span<const std::byte> bytes(const std::string& name) const { return spec_.files->bytes(name); }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  const io::ModelSpec& spec_;
  std::shared_ptr<const void> owner_;  // keeps the mappings alive
};

// A stored high-precision weight quantized with quantize_weight (F16 is widened
// to float32 first), as LinearWeights that own their codes.
cpu::LinearWeights online_fp8(const TensorSource& src, const std::string& name, int64_t n, int64_t k,
                              const LinearQuantScheme& s) {
  QuantizedMatrix q;
  if (src.info(name).dtype == DType::kBF16) {
    const cpu::LinearWeights hp = src.matrix(name, n, k);
    q = quantize_weight(MatrixView::bf16(static_cast<const uint16_t*>(hp.data), n, k), s);
  } else {
    const std::vector<float> f = src.floats(name);
    q = quantize_weight(MatrixView::f32(f.data(), n, k), s);
  }
  io::release_pages(src.bytes(name));
  auto codes = std::make_shared<std::vector<uint8_t>>(std::move(q.codes));
  cpu::LinearWeights w = cpu::fp8_weights(codes->data(), n, k, s, std::move(q.scales));
  w.owner = codes;
  return w;
}

void check_scales(const std::vector<float>& scales, const std::string& name) {
  for (float s : scales)
    if (!std::isfinite(s) || s <= 0.0f)
      throw Error("tensor '" + name + "' holds scale " + std::to_string(s) + ": scales must be finite and positive");
}

cpu::LinearWeights load_linear(const TensorSource& src, const io::LinearLayerSpec& l) {
  const int64_t n = l.module.out_features, k = l.module.in_features;
  const LinearQuantScheme& s = l.scheme;
  cpu::LinearWeights w;
  if (!s.quantized) {
    w = src.matrix(l.weight_name, n, k);
  } else if (s.weights_serialized) {
    std::vector<float> scales = src.floats(l.weight_scale_name);
    check_scales(scales, l.weight_scale_name);
    float input_scale = 0.0f;
    if (s.activation == ActivationQuant::kStaticTensor) {
      const std::vector<float> is = src.floats(l.input_scale_name);
      check_scales(is, l.input_scale_name);
      input_scale = is.at(0);
    }
    const auto* codes = reinterpret_cast<const uint8_t*>(src.bytes(l.weight_name).data());
    w = cpu::fp8_weights(codes, n, k, s, std::move(scales), input_scale);
    w.owner = src.owner();
  } else {
    // Online quantization, then the high-precision pages are dropped from
    // resident memory so only the FP8 copy stays.
    w = online_fp8(src, l.weight_name, n, k, s);
  }
  if (l.module.has_bias) {
    w.bias = src.floats(l.module.name + ".bias");
    cpu::validate(w);
  }
  return w;
}

// --fp8-embeddings: a [rows, cols] high-precision table as FP8 with one scale
// per row and no activation quantization, so the embedding lookup and the
// output projection both read 1-byte codes.
cpu::LinearWeights quantize_per_row(const TensorSource& src, const std::string& name, int64_t rows, int64_t cols) {
  LinearQuantScheme s;
  s.quantized = true;
  s.weights_serialized = false;
  s.weight_scales = ScaleLayout::channel();
  s.activation = ActivationQuant::kNone;
  return online_fp8(src, name, rows, cols, s);
}

std::string layer_name(const std::string& pattern, int layer) {
  std::string s = pattern;
  const size_t at = s.find("{layer}");
  if (at != std::string::npos) s.replace(at, 7, std::to_string(layer));
  return s;
}

float kv_scale(const TensorSource& src, const std::string& name) {
  const std::vector<float> v = src.floats(name);
  if (v.size() != 1)
    throw Error("tensor '" + name + "' holds " + std::to_string(v.size()) +
                " KV-cache scales (one per KV head); fp8lm uses one scale per layer so far");
  check_scales(v, name);
  return v[0];
}

}  // namespace

void check_supported(const io::ModelSpec& spec) {
  const ModelConfig& c = spec.config;
  if (c.is_moe())
    throw Error(spec.directory.string() + ": " + c.architecture +
                " is a mixture-of-experts model; fp8lm runs the dense Llama family (Llama, Qwen2, Qwen3, Mistral) so far");
}

HostModelWeights load_host_weights(const io::ModelSpec& spec, const LoadProgress& progress) {
  if (spec.dummy_weights) return dummy_host_weights(spec);  // --load-format dummy: nothing to read
  check_supported(spec);
  const ModelConfig& c = spec.config;
  const TensorSource src(spec);
  HostModelWeights w;
  const bool fp8_embeddings = spec.quantization.fp8_embeddings;
  w.embedding = fp8_embeddings ? quantize_per_row(src, "model.embed_tokens.weight", c.vocab_size, c.hidden_size)
                               : src.matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
  w.final_norm = src.floats("model.norm.weight");

  std::map<std::string, const io::LinearLayerSpec*> by_name;
  for (const io::LinearLayerSpec& l : spec.linears) by_name[l.module.name] = &l;
  auto linear = [&](const std::string& name) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) throw Error(spec.directory.string() + ": no linear module '" + name + "'");
    return load_linear(src, *it->second);
  };

  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    HostLayer l;
    l.input_norm = src.floats(p + "input_layernorm.weight");
    l.post_attention_norm = src.floats(p + "post_attention_layernorm.weight");
    if (c.qk_norm) {
      l.q_norm = src.floats(p + "self_attn.q_norm.weight");
      l.k_norm = src.floats(p + "self_attn.k_norm.weight");
    }
    l.q = linear(p + "self_attn.q_proj");
    l.k = linear(p + "self_attn.k_proj");
    l.v = linear(p + "self_attn.v_proj");
    l.o = linear(p + "self_attn.o_proj");
    l.gate = linear(p + "mlp.gate_proj");
    l.up = linear(p + "mlp.up_proj");
    l.down = linear(p + "mlp.down_proj");
    w.layers.push_back(std::move(l));
    if (progress) progress(i + 1, c.num_hidden_layers);
  }
  if (c.tie_word_embeddings) w.lm_head = w.embedding;
  else if (fp8_embeddings) w.lm_head = quantize_per_row(src, "lm_head.weight", c.vocab_size, c.hidden_size);
  else w.lm_head = linear("lm_head");

  std::tie(w.k_scales, w.v_scales) = read_kv_scales(spec);
  return w;
}

std::pair<std::vector<float>, std::vector<float>> read_kv_scales(const io::ModelSpec& spec) {
  const KvCacheScheme& kv = spec.kv_cache();
  std::vector<float> k, v;
  if (kv.k_scale_name.empty() || kv.v_scale_name.empty()) return {k, v};
  const TensorSource src(spec);
  for (int i = 0; i < spec.config.num_hidden_layers; ++i) {
    k.push_back(kv_scale(src, layer_name(kv.k_scale_name, i)));
    v.push_back(kv_scale(src, layer_name(kv.v_scale_name, i)));
  }
  return {k, v};
}

QuantizedMatrix quantize_weight(const MatrixView& weight, const LinearQuantScheme& scheme) {
  if (!scheme.quantized) throw Error("quantize_weight: the scheme is not quantized");
  const QuantSpec spec{scheme.weight_format, scheme.weight_scales, ScaleRule::compressed_tensors(weight.dtype)};
  return quantize_dynamic(weight, spec);
}

uint64_t resident_weight_bytes(const HostModelWeights& w) {
  auto linear_bytes = [](const cpu::LinearWeights& l) -> uint64_t {
    const uint64_t width = l.is_fp8() ? 1 : l.storage == cpu::WeightStorage::kF32 ? 4 : 2;
    return uint64_t(l.n * l.k) * width + 4 * (l.scales.size() + l.bias.size());
  };
  uint64_t total = linear_bytes(w.embedding) + 4 * w.final_norm.size();
  for (const HostLayer& l : w.layers) {
    total += 4 * (l.input_norm.size() + l.post_attention_norm.size() + l.q_norm.size() + l.k_norm.size());
    for (const cpu::LinearWeights* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) total += linear_bytes(*x);
  }
  if (w.lm_head.data != w.embedding.data) total += linear_bytes(w.lm_head);
  return total;
}

}  // namespace fp8lm::loader
