// The one weight quantizer of fp8lm. `--quantization fp8` at load,
// `--fp8-embeddings` and `fp8lm quantize` all go through it, so the same model
// and scheme give the same bytes. It does what LLM Compressor writes
// (compressed-tensors' arithmetic in the weight's own dtype: scale =
// dtype(amax / max), code = fp8(dtype(w / scale)), docs/numerics.md), in the
// scheme's weight layout.
#pragma once

#include "numerics/quantize.h"
#include "spec/quant_scheme.h"

namespace fp8lm::weights {

// The QuantSpec compressed-tensors uses for `scheme` on a weight stored as `dtype`:
// {scheme.weight_format, scheme.weight_scales, ScaleRule::compressed_tensors(dtype)}.
// Throws fp8lm::Error when the scheme is not quantized.
QuantSpec weight_quant_spec(const LinearQuantScheme& scheme, HighPrecision dtype);

// quantize_dynamic(weight, weight_quant_spec(scheme, weight.dtype)).
QuantizedMatrix quantize_weight(const MatrixView& weight, const LinearQuantScheme& scheme);

}  // namespace fp8lm::weights
