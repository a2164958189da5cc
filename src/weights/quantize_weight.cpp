#include "weights/quantize_weight.h"

#include "common/error.h"

namespace fp8lm::weights {

QuantSpec weight_quant_spec(const LinearQuantScheme& scheme, HighPrecision dtype) {
  if (!scheme.quantized) throw Error("quantize_weight: the scheme is not quantized");
  return QuantSpec{scheme.weight_format, scheme.weight_scales, ScaleRule::compressed_tensors(dtype)};
}

QuantizedMatrix quantize_weight(const MatrixView& weight, const LinearQuantScheme& scheme) {
  return quantize_dynamic(weight, weight_quant_spec(scheme, weight.dtype));
}

}  // namespace fp8lm::weights
