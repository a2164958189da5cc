// Every mapping between ElementType and the enums at the edges of fp8lm: the
// safetensors dtype (file format), the config's dtype, the user's KV-cache
// choice and the quantizer's high-precision input. This is the only place they
// are written (definitions in element_type_maps.cpp).
#pragma once

#include <optional>

#include "io/dtype.h"
#include "numerics/quantize.h"
#include "spec/model_config.h"
#include "spec/quant_scheme.h"
#include "weights/element_type.h"

namespace fp8lm {

// F32 BF16 F16 F8_E4M3 F8_E5M2; every other file dtype: nullopt.
std::optional<ElementType> element_type(io::DType d);
// The safetensors dtype a writer stores `e` as.
io::DType dtype(ElementType e);
ElementType element_type(ModelDType d);
// kAuto is the model's dtype, BF16 for every checkpoint fp8lm serves.
ElementType kv_element_type(KvCacheDType d);
// F32 / BF16; throws fp8lm::Error for any other type (the quantizer reads only these two).
HighPrecision high_precision(ElementType e);

}  // namespace fp8lm
