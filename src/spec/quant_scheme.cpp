#include "spec/quant_scheme.h"

namespace fp8lm {

std::string_view name(ActivationQuant a) {
  switch (a) {
    case ActivationQuant::kNone: return "none";
    case ActivationQuant::kDynamicTensor: return "dynamic-tensor";
    case ActivationQuant::kDynamicToken: return "dynamic-token";
    case ActivationQuant::kDynamicGroup: return "dynamic-group";
    case ActivationQuant::kStaticTensor: return "static-tensor";
  }
  return "?";
}

std::string_view name(KvCacheDType d) {
  switch (d) {
    case KvCacheDType::kAuto: return "auto";
    case KvCacheDType::kBF16: return "bf16";
    case KvCacheDType::kF32: return "fp32";
    case KvCacheDType::kFP8E4M3: return "fp8_e4m3";
    case KvCacheDType::kFP8E5M2: return "fp8_e5m2";
  }
  return "?";
}

std::string LinearQuantScheme::describe() const {
  if (!quantized) return "not quantized";
  std::string s = "fp8-" + std::string(name(weight_format)) + " w:";
  switch (weight_scales.granularity) {
    case Granularity::kBlock:
      s += "block" + std::to_string(weight_scales.group_rows) + "x" + std::to_string(weight_scales.group_cols);
      break;
    case Granularity::kGroup:
      s += "group" + std::to_string(weight_scales.group_cols);
      break;
    default:
      s += std::string(name(weight_scales.granularity));
  }
  if (!weights_serialized) s += "(online)";
  s += " a:";
  if (activation == ActivationQuant::kNone) {
    s += "bf16 (weight-only)";
  } else {
    s += std::string(name(activation));
    if (activation == ActivationQuant::kDynamicGroup) s += std::to_string(activation_group);
  }
  return s;
}

}  // namespace fp8lm
