#include "weights/linear_weight.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"

namespace fp8lm::weights {
namespace {

std::string shape(int64_t n, int64_t k) {
  return "[" + std::to_string(n) + ", " + std::to_string(k) + "]";
}

int64_t weight_scale_width(const ScaleLayout& l) {
  return l.granularity == Granularity::kBlock || l.granularity == Granularity::kGroup ? l.group_cols : 0;
}

void apply_scheme(LinearWeight& w, const LinearQuantScheme& scheme, float input_scale) {
  w.element = element_type(scheme.weight_format);
  w.scale_layout = scheme.weight_scales;
  w.activation = scheme.activation;
  w.activation_group = scheme.activation_group;
  w.activation_scale_upper_bound = scheme.activation_scale_upper_bound;
  w.input_scale = input_scale;
}

}  // namespace

uint64_t LinearWeight::resident_bytes() const {
  return uint64_t(n * k) * element_bytes(element) + 4 * (scales.size() + bias.size());
}

LinearWeight high_precision(ElementType e, const void* data, int64_t n, int64_t k) {
  if (fp8lm::is_fp8(e)) throw Error("linear: FP8 weights need scales; use weights::fp8()");
  LinearWeight w;
  w.element = e;
  w.data = data;
  w.n = n;
  w.k = k;
  validate(w);
  return w;
}

LinearWeight fp8(const uint8_t* codes, int64_t n, int64_t k, const LinearQuantScheme& scheme,
                 std::vector<float> scales, float input_scale) {
  if (!scheme.quantized) throw Error("linear: weights::fp8() given a scheme that is not quantized");
  LinearWeight w;
  w.data = codes;
  w.n = n;
  w.k = k;
  w.scales = std::move(scales);
  apply_scheme(w, scheme, input_scale);
  validate(w);
  return w;
}

LinearWeight from_quantized(QuantizedMatrix q, const LinearQuantScheme& scheme, float input_scale) {
  if (!scheme.quantized) throw Error("linear: online quantization given a scheme that is not quantized");
  if (q.format != scheme.weight_format || !(q.layout == scheme.weight_scales))
    throw Error("linear: quantized matrix " + shape(q.rows, q.cols) + " is not in the scheme's weight format and layout");
  auto codes = std::make_shared<std::vector<uint8_t>>(std::move(q.codes));
  LinearWeight w = fp8(codes->data(), q.rows, q.cols, scheme, std::move(q.scales), input_scale);
  w.owner = std::move(codes);
  return w;
}

LinearWeight stack_rows(std::span<const LinearWeight> parts) {
  if (parts.empty()) throw Error("linear: stack_rows of no parts");
  const LinearWeight& first = parts[0];
  LinearWeight f = first;
  f.n = 0;
  bool any_bias = false;
  for (const LinearWeight& p : parts) {
    if (p.k != first.k || p.element != first.element)
      throw Error("linear: stack_rows of parts with different K or element types");
    f.n += p.n;
    any_bias = any_bias || !p.bias.empty();
  }
  f.scales.clear();
  f.bias.clear();
  for (const LinearWeight& p : parts) {
    if (p.is_fp8()) {
      if (p.scale_layout.granularity == Granularity::kTensor) f.scales.insert(f.scales.end(), size_t(p.n), p.scales[0]);
      else f.scales.insert(f.scales.end(), p.scales.begin(), p.scales.end());  // channel [n] or block rows
    }
    if (any_bias) {
      if (p.bias.empty()) f.bias.insert(f.bias.end(), size_t(p.n), 0.0f);
      else f.bias.insert(f.bias.end(), p.bias.begin(), p.bias.end());
    }
  }
  if (first.is_fp8() && first.scale_layout.granularity != Granularity::kBlock) f.scale_layout = ScaleLayout::channel();
  f.data = nullptr;
  f.owner = nullptr;
  return f;
}

int64_t k_segment(const LinearWeight& w) {
  const int64_t ws = weight_scale_width(w.scale_layout);
  const int64_t as = w.activation == ActivationQuant::kDynamicGroup ? w.activation_group : 0;
  if (ws == 0 || as == 0) return std::max(ws, as);
  const int64_t lo = std::min(ws, as), hi = std::max(ws, as);
  if (hi % lo != 0) {
    throw Error("linear: activation group " + std::to_string(as) + " and weight scale block width " +
                std::to_string(ws) + " along K do not nest (one must divide the other)");
  }
  return lo;
}

void validate(const LinearWeight& w) {
  if (w.n <= 0 || w.k <= 0) throw Error("linear: weight shape must be positive, got " + shape(w.n, w.k));
  if (w.data == nullptr) throw Error("linear: weight " + shape(w.n, w.k) + " has no data");
  validate_layout(w);
}

void validate_layout(const LinearWeight& w) {
  if (w.n <= 0 || w.k <= 0) throw Error("linear: weight shape must be positive, got " + shape(w.n, w.k));
  if (!w.bias.empty() && int64_t(w.bias.size()) != w.n) {
    throw Error("linear: bias has " + std::to_string(w.bias.size()) + " values, expected N = " +
                std::to_string(w.n));
  }
  if (!w.is_fp8()) {
    if (w.activation != ActivationQuant::kNone) {
      throw Error("linear: activation quantization '" + std::string(name(w.activation)) +
                  "' needs FP8 weights, but the weight is high precision");
    }
    return;
  }
  const int64_t expected = w.scale_layout.scale_rows(w.n) * w.scale_layout.scale_cols(w.k);
  if (int64_t(w.scales.size()) != expected) {
    throw Error("linear: weight " + shape(w.n, w.k) + " with " +
                std::string(name(w.scale_layout.granularity)) + " scales needs " +
                std::to_string(expected) + " weight scales, got " + std::to_string(w.scales.size()));
  }
  for (size_t i = 0; i < w.scales.size(); ++i) {
    if (!std::isfinite(w.scales[i]) || w.scales[i] < 0.0f) {
      throw Error("linear: weight scale " + std::to_string(i) + " is " + std::to_string(w.scales[i]) +
                  " (must be finite and >= 0)");
    }
  }
  switch (w.activation) {
    case ActivationQuant::kNone:
    case ActivationQuant::kDynamicTensor:
      break;
    case ActivationQuant::kDynamicToken:
      if (!std::isfinite(w.activation_scale_upper_bound) || w.activation_scale_upper_bound < 0.0f) {
        throw Error("linear: activation scale upper bound must be finite and >= 0, got " +
                    std::to_string(w.activation_scale_upper_bound));
      }
      break;
    case ActivationQuant::kDynamicGroup:
      if (w.activation_group <= 0) {
        throw Error("linear: activation group must be > 0, got " + std::to_string(w.activation_group));
      }
      break;
    case ActivationQuant::kStaticTensor:
      if (!(std::isfinite(w.input_scale) && w.input_scale > 0.0f)) {
        throw Error("linear: static activation quantization needs input_scale > 0 (missing input_scale?), got " +
                    std::to_string(w.input_scale));
      }
      break;
  }
  if (w.activation != ActivationQuant::kNone) k_segment(w);
}

LinearQuantScheme per_row_embedding_scheme() {
  LinearQuantScheme s;
  s.quantized = true;
  s.weights_serialized = false;
  s.weight_format = Fp8Format::kE4M3;
  s.weight_scales = ScaleLayout::channel();
  s.activation = ActivationQuant::kNone;
  return s;
}

QuantizedMatrix quantized_matrix(const LinearWeight& w) {
  QuantizedMatrix q;
  q.format = w.format();
  q.layout = w.scale_layout;
  q.rows = w.n;
  q.cols = w.k;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  q.codes.assign(codes, codes + w.n * w.k);
  q.scale_rows = w.scale_layout.scale_rows(w.n);
  q.scale_cols = w.scale_layout.scale_cols(w.k);
  q.scales = w.scales;
  return q;
}

std::vector<float> dequantized(const LinearWeight& w) {
  if (w.is_fp8()) return dequantize_f32(quantized_matrix(w));
  std::vector<float> out(size_t(w.n * w.k));
  to_float(w.data, w.element, w.n * w.k, out.data());
  return out;
}

}  // namespace fp8lm::weights
