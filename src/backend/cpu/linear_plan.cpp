#include "backend/cpu/linear_plan.h"

#include <cstdio>

#include "numerics/fp8_format.h"
#include "spec/quant_scheme.h"

namespace fp8lm::cpu {
namespace {

// Shortest decimal that reads back as the same float, so a plan line names the exact value.
std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

std::string layout_text(const ScaleLayout& l) {
  switch (l.granularity) {
    case Granularity::kBlock:
      return "block" + std::to_string(l.group_rows) + "x" + std::to_string(l.group_cols);
    case Granularity::kGroup:
      return "group" + std::to_string(l.group_cols);
    default:
      return std::string(name(l.granularity));
  }
}

}  // namespace

LinearPlan plan_linear(const weights::LinearWeight& w) {
  weights::validate(w);
  LinearPlan p;
  p.weight = w.element;
  if (!w.is_fp8()) return p;
  p.weight_scales = w.scale_layout;
  const Granularity g = w.scale_layout.granularity;
  p.weight_scale_width = g == Granularity::kBlock || g == Granularity::kGroup ? w.scale_layout.group_cols : 0;
  if (w.activation == ActivationQuant::kNone) {
    p.path = LinearPlan::Path::kWeightOnly;
    return p;
  }
  p.path = LinearPlan::Path::kW8A8;
  p.segment = weights::k_segment(w);
  // Activations are E4M3 whatever the weights are, as in vLLM's kernels.
  const Fp8Format fmt = Fp8Format::kE4M3;
  switch (w.activation) {
    case ActivationQuant::kNone:
      break;
    case ActivationQuant::kDynamicTensor:
      p.x_quant = QuantSpec{fmt, ScaleLayout::tensor(), ScaleRule::runtime(fmt)};
      break;
    case ActivationQuant::kDynamicToken:
      p.x_quant = QuantSpec{fmt, ScaleLayout::token(), ScaleRule::runtime(fmt)};
      if (w.activation_scale_upper_bound > 0.0f) {
        p.x_scale = LinearPlan::XScale::kDynamicCapped;
        p.x_scale_cap = w.activation_scale_upper_bound / traits(fmt).max_finite;
      }
      break;
    case ActivationQuant::kDynamicGroup:
      p.x_quant = QuantSpec{fmt, ScaleLayout::group(w.activation_group), ScaleRule::vllm_group()};
      break;
    case ActivationQuant::kStaticTensor:
      p.x_quant = QuantSpec{fmt, ScaleLayout::tensor(), ScaleRule::runtime(fmt)};
      p.x_scale = LinearPlan::XScale::kStatic;
      p.x_static_scale = w.input_scale;
      break;
  }
  return p;
}

std::string LinearPlan::describe() const {
  if (path == Path::kHighPrecision) return std::string(name(weight)) + " (not quantized)";
  std::string s = path == Path::kW8A8 ? "w8a8 " : "w8a16 ";
  s += std::string(name(weight)) + " w:" + layout_text(weight_scales);
  if (path != Path::kW8A8 || !x_quant) return s;
  s += " a:";
  switch (x_scale) {
    case XScale::kStatic:
      s += "static-tensor scale=" + float_text(x_static_scale);
      break;
    case XScale::kDynamicCapped:
      s += "dynamic-" + layout_text(x_quant->layout) + " cap=" + float_text(x_scale_cap);
      break;
    case XScale::kDynamic:
      s += "dynamic-" + layout_text(x_quant->layout);
      break;
  }
  s += " segment=" + (segment > 0 ? std::to_string(segment) : std::string("k"));
  return s;
}

}  // namespace fp8lm::cpu
