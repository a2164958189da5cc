// The one element-type enum of fp8lm: what a weight, an activation or a
// KV-cache layer is stored as. The file-format, config and user-choice enums
// (io::DType, ModelDType, KvCacheDType) and the numerics subsets (Fp8Format,
// HighPrecision) stay at the edges and are mapped to this one only in
// weights/element_type_maps.{h,cpp}.
//
// No io or spec include: CUDA sources (.cu) may include this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "numerics/fp8_format.h"

namespace fp8lm {

enum class ElementType : uint8_t { kF32, kBF16, kF16, kE4M3, kE5M2 };

constexpr bool is_fp8(ElementType e) { return e == ElementType::kE4M3 || e == ElementType::kE5M2; }

constexpr size_t element_bytes(ElementType e) {
  switch (e) {
    case ElementType::kF32: return 4;
    case ElementType::kBF16:
    case ElementType::kF16: return 2;
    case ElementType::kE4M3:
    case ElementType::kE5M2: return 1;
  }
  return 1;
}

// "f32" "bf16" "f16" "e4m3" "e5m2" (the KV cache's messages and traces print these).
std::string_view name(ElementType e);

// The FP8 subset, both ways; fp8_format throws fp8lm::Error for a type that is not FP8.
constexpr ElementType element_type(Fp8Format f) {
  return f == Fp8Format::kE5M2 ? ElementType::kE5M2 : ElementType::kE4M3;
}
Fp8Format fp8_format(ElementType e);

// IEEE half -> float, exact (every half is a float).
float f16_to_float(uint16_t h);

// out[i] = float(src[i]) for F32 / BF16 / F16, exact (a plain scalar loop).
// Throws fp8lm::Error for an FP8 type: its values mean nothing without a scale.
void to_float(const void* src, ElementType e, int64_t n, float* out);

}  // namespace fp8lm
