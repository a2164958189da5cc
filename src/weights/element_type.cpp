#include "weights/element_type.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/error.h"

namespace fp8lm {

std::string_view name(ElementType e) {
  switch (e) {
    case ElementType::kF32: return "f32";
    case ElementType::kBF16: return "bf16";
    case ElementType::kF16: return "f16";
    case ElementType::kE4M3: return "e4m3";
    case ElementType::kE5M2: return "e5m2";
  }
  return "?";
}

Fp8Format fp8_format(ElementType e) {
  if (e == ElementType::kE4M3) return Fp8Format::kE4M3;
  if (e == ElementType::kE5M2) return Fp8Format::kE5M2;
  throw Error("element type " + std::string(name(e)) + " is not an FP8 format");
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    // zero or subnormal: man × 2^-24, exact in float
    const float v = float(man) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(v));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

void to_float(const void* src, ElementType e, int64_t n, float* out) {
  switch (e) {
    case ElementType::kF32:
      std::memcpy(out, src, size_t(n) * sizeof(float));
      return;
    case ElementType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
      return;
    }
    case ElementType::kF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(p[i]);
      return;
    }
    case ElementType::kE4M3:
    case ElementType::kE5M2:
      break;
  }
  throw Error("to_float: " + std::string(name(e)) + " values need their scales (dequantize them instead)");
}

}  // namespace fp8lm
