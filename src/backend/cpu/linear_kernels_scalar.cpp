// Portable inner loops of the linear layer: the reference the vector tables
// are tested against (with tolerances) and the fallback on any CPU.
#include <bit>
#include <cstring>

#include "backend/cpu/linear_kernels.h"

namespace fp8lm::cpu {

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

namespace {

void to_float(const void* src, WeightStorage storage, int64_t n, float* out) {
  switch (storage) {
    case WeightStorage::kF32:
      std::memcpy(out, src, size_t(n) * sizeof(float));
      return;
    case WeightStorage::kBF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
      return;
    }
    case WeightStorage::kF16: {
      const auto* p = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(p[i]);
      return;
    }
    case WeightStorage::kFP8:
      break;  // not a high-precision storage; the caller never asks
  }
}

void fp8_to_float(const uint8_t* codes, int64_t n, Fp8Format format, float scale, float* out) {
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = fp8lm::fp8_to_float(uint8_t(c), format) * scale;
  for (int64_t i = 0; i < n; ++i) out[i] = lut[codes[i]];
}

template <int MR, int NR>
void dot(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len, float* out) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < len; ++k) acc += x[i * ldx + k] * w[j * ldw + k];
      out[i * NR + j] = acc;
    }
  }
}

}  // namespace

const LinearKernels& linear_kernels_scalar() {
  // 1 × 1 tiles: the scalar loop gains nothing from register blocking.
  static const LinearKernels table{"scalar", to_float, fp8_to_float, 1, 1,
                                   FP8LM_LINEAR_DOT_TABLE(dot)};
  return table;
}

}  // namespace fp8lm::cpu
