#include "loader/host_weights.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "io/mapped_file.h"
#include "loader/dummy_weights.h"
#include "spec/model_tensors.h"
#include "weights/element_type_maps.h"
#include "weights/quantize_weight.h"

namespace fp8lm::loader {
namespace {

using io::DType;
using io::TensorInfo;

// The element type of a float tensor (F32 / BF16 / F16); throws for any other.
ElementType float_element(const io::CheckpointFiles& files, const std::string& name) {
  const io::DType d = files.tensor(name).dtype;
  const std::optional<ElementType> e = element_type(d);
  if (!e || is_fp8(*e))
    throw Error(files.directory().string() + ": tensor '" + name + "' is " + std::string(io::dtype_name(d)) +
                ", expected a float tensor");
  return *e;
}

// Reads one weight or scale tensor of the checkpoint.
class TensorSource {
 public:
  explicit TensorSource(const io::ModelSpec& spec)
      : spec_(spec), owner_(std::shared_ptr<const void>(spec.files, spec.files.get())) {}

  const TensorInfo& info(const std::string& name) const { return spec_.files->tensor(name); }

  ElementType float_element(const std::string& name) const { return loader::float_element(*spec_.files, name); }

  // Any float tensor as float32 values.
  std::vector<float> floats(const std::string& name) const { return read_float_tensor(*spec_.files, name); }

  // A high-precision matrix as stored, pointing into the mapping (copied only
  // when the file places it at an address its element type cannot be read from).
  weights::LinearWeight matrix(const std::string& name, int64_t n, int64_t k) const {
    const std::span<const std::byte> b = spec_.files->bytes(name);
    const ElementType e = float_element(name);  // io::ModelSpec admitted only these
    const size_t width = element_bytes(e);
    if (reinterpret_cast<uintptr_t>(b.data()) % width == 0) {
      weights::LinearWeight w = weights::high_precision(e, b.data(), n, k);
      w.owner = owner_;
      return w;
    }
    auto copy = std::make_shared<std::vector<uint32_t>>((b.size() + 3) / 4);
    std::memcpy(copy->data(), b.data(), b.size());
    weights::LinearWeight w = weights::high_precision(e, copy->data(), n, k);
    w.owner = copy;
    return w;
  }

  std::span<const std::byte> bytes(const std::string& name) const { return spec_.files->bytes(name); }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  const io::ModelSpec& spec_;
  std::shared_ptr<const void> owner_;  // keeps the mappings alive
};

// A stored high-precision weight quantized with weights::quantize_weight (F16
// is widened to float32 first), as a LinearWeight that owns its codes.
weights::LinearWeight online_fp8(const TensorSource& src, const std::string& name, int64_t n, int64_t k,
                                 const LinearQuantScheme& s) {
  QuantizedMatrix q;
  if (src.info(name).dtype == DType::kBF16) {
    const weights::LinearWeight hp = src.matrix(name, n, k);
    q = weights::quantize_weight(MatrixView::bf16(static_cast<const uint16_t*>(hp.data), n, k), s);
  } else {
    const std::vector<float> f = src.floats(name);
    q = weights::quantize_weight(MatrixView::f32(f.data(), n, k), s);
  }
  io::release_pages(src.bytes(name));
  return weights::from_quantized(std::move(q), s);
}

void check_scales(const std::vector<float>& scales, const std::string& name) {
  for (float s : scales)
    if (!std::isfinite(s) || s <= 0.0f)
      throw Error("tensor '" + name + "' holds scale " + std::to_string(s) + ": scales must be finite and positive");
}

weights::LinearWeight load_linear(const TensorSource& src, const io::LinearLayerSpec& l) {
  const int64_t n = l.module.out_features, k = l.module.in_features;
  const LinearQuantScheme& s = l.scheme;
  weights::LinearWeight w;
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
    w = weights::fp8(codes, n, k, s, std::move(scales), input_scale);
    w.owner = src.owner();
  } else {
    // Online quantization, then the high-precision pages are dropped from
    // resident memory so only the FP8 copy stays.
    w = online_fp8(src, l.weight_name, n, k, s);
  }
  if (l.module.has_bias) {
    w.bias = src.floats(l.module.name + ".bias");
    weights::validate(w);
  }
  return w;
}

// --fp8-embeddings: a [rows, cols] high-precision table as FP8, one scale per row.
weights::LinearWeight quantize_per_row(const TensorSource& src, const std::string& name, int64_t rows, int64_t cols) {
  return online_fp8(src, name, rows, cols, weights::per_row_embedding_scheme());
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

std::vector<float> read_float_tensor(const io::CheckpointFiles& files, const std::string& name) {
  const ElementType e = float_element(files, name);
  const std::span<const std::byte> b = files.bytes(name);
  // Copied first: a file may place a tensor at any byte offset.
  std::vector<uint32_t> aligned((b.size() + 3) / 4);
  std::memcpy(aligned.data(), b.data(), b.size());
  std::vector<float> out(files.tensor(name).element_count());
  to_float(aligned.data(), e, int64_t(out.size()), out.data());
  return out;
}

HostModelWeights load_host_weights(const io::ModelSpec& spec, const LoadProgress& progress) {
  if (spec.dummy_weights) return dummy_host_weights(spec);  // --load-format dummy: nothing to read
  check_supported(spec);
  const ModelConfig& c = spec.config;
  const TensorSource src(spec);
  HostModelWeights w;
  const bool fp8_embeddings = spec.quantization.fp8_embeddings;
  const std::string embed(kEmbedTokensWeight);
  w.embedding = fp8_embeddings ? quantize_per_row(src, embed, c.vocab_size, c.hidden_size)
                               : src.matrix(embed, c.vocab_size, c.hidden_size);
  w.final_norm = src.floats(std::string(kFinalNormWeight));

  const LinearSpecs linears(spec);
  auto linear = [&](const std::string& name) { return load_linear(src, linears.at(name)); };

  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerTensorNames n = layer_tensor_names(i);  // the norms' names
    HostLayer l;
    l.input_norm = src.floats(n.input_norm);
    l.post_attention_norm = src.floats(n.post_attention_norm);
    set_projections(l, c, i, linear);
    set_layer_vectors(l, c, i, [&](const std::string& name, int64_t, bool) { return src.floats(name); });
    w.layers.push_back(std::move(l));
    if (progress) progress(i + 1, c.num_hidden_layers);
  }
  if (c.tie_word_embeddings) w.lm_head = w.embedding;
  else if (fp8_embeddings) w.lm_head = quantize_per_row(src, std::string(kLmHead) + ".weight", c.vocab_size, c.hidden_size);
  else w.lm_head = linear(std::string(kLmHead));

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

}  // namespace fp8lm::loader
