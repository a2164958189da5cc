// Portable reference loops: one element at a time, straight from fp8_format.h.
#include <array>
#include <cmath>

#include "numerics/cpu/kernels.h"

namespace fp8lm::cpu {
namespace {

using DecodeTable = std::array<float, 256>;

constexpr DecodeTable make_decode_table(Fp8Format format) {
  DecodeTable t{};
  for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8_to_float(uint8_t(c), format);
  return t;
}

const DecodeTable& decode_table(Fp8Format format) {
  static const DecodeTable e4m3 = make_decode_table(Fp8Format::kE4M3);
  static const DecodeTable e5m2 = make_decode_table(Fp8Format::kE5M2);
  return format == Fp8Format::kE4M3 ? e4m3 : e5m2;
}

float load(const void* x, HighPrecision dtype, size_t i) {
  return dtype == HighPrecision::kF32 ? static_cast<const float*>(x)[i]
                                      : bf16_to_float(static_cast<const uint16_t*>(x)[i]);
}

float amax_scalar(const void* x, HighPrecision dtype, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(load(x, dtype, i));
    m = a > m ? a : m;  // false for NaN: NaNs are skipped
  }
  return m;
}

void quantize_scalar(const void* x, HighPrecision dtype, size_t n, float scale,
                     const QuantizeArgs& args, uint8_t* out) {
  const bool bf16_quotient = args.quotient == HighPrecision::kBF16;
  for (size_t i = 0; i < n; ++i) {
    float q = load(x, dtype, i) / scale;
    if (bf16_quotient) q = round_to_bf16(q);
    if (args.add_zero) q = q + 0.0f;
    out[i] = float_to_fp8(q, args.format, args.saturation);
  }
}

void dequantize_f32_scalar(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                           float* out) {
  const DecodeTable& t = decode_table(format);
  for (size_t i = 0; i < n; ++i) out[i] = t[codes[i]] * scale;
}

void dequantize_bf16_scalar(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                            uint16_t* out) {
  const DecodeTable& t = decode_table(format);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(t[codes[i]] * scale);
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table{"scalar", amax_scalar, quantize_scalar, dequantize_f32_scalar,
                                 dequantize_bf16_scalar};
  return table;
}

}  // namespace fp8lm::cpu
