#include "weights/element_type_maps.h"

#include <string>

#include "common/error.h"

namespace fp8lm {

std::optional<ElementType> element_type(io::DType d) {
  switch (d) {
    case io::DType::kF32: return ElementType::kF32;
    case io::DType::kBF16: return ElementType::kBF16;
    case io::DType::kF16: return ElementType::kF16;
    case io::DType::kF8_E4M3: return ElementType::kE4M3;
    case io::DType::kF8_E5M2: return ElementType::kE5M2;
    default: return std::nullopt;
  }
}

io::DType dtype(ElementType e) {
  switch (e) {
    case ElementType::kF32: return io::DType::kF32;
    case ElementType::kBF16: return io::DType::kBF16;
    case ElementType::kF16: return io::DType::kF16;
    case ElementType::kE4M3: return io::DType::kF8_E4M3;
    case ElementType::kE5M2: return io::DType::kF8_E5M2;
  }
  return io::DType::kBF16;
}

ElementType element_type(ModelDType d) {
  switch (d) {
    case ModelDType::kBF16: return ElementType::kBF16;
    case ModelDType::kF16: return ElementType::kF16;
    case ModelDType::kF32: return ElementType::kF32;
  }
  return ElementType::kBF16;
}

ElementType kv_element_type(KvCacheDType d) {
  switch (d) {
    case KvCacheDType::kAuto:
    case KvCacheDType::kBF16: return ElementType::kBF16;
    case KvCacheDType::kF32: return ElementType::kF32;
    case KvCacheDType::kFP8E4M3: return ElementType::kE4M3;
    case KvCacheDType::kFP8E5M2: return ElementType::kE5M2;
  }
  return ElementType::kBF16;
}

HighPrecision high_precision(ElementType e) {
  if (e == ElementType::kF32) return HighPrecision::kF32;
  if (e == ElementType::kBF16) return HighPrecision::kBF16;
  throw Error("element type " + std::string(name(e)) + " is not a quantizer input (F32 or BF16)");
}

}  // namespace fp8lm
