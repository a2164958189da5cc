// FP8 element formats and the scalar conversions every other part of fp8lm is
// measured against. The contract (docs/numerics.md) in one paragraph:
//
//   * E4M3 is OCP E4M3FN (torch.float8_e4m3fn): bias 7, max ±448, no infinities,
//     NaN = S.1111.111 (0x7F / 0xFF). E5M2 is IEEE-like: bias 15, max ±57344,
//     ±inf = 0x7C / 0xFC, NaN = S.11111.{01,10,11}.
//   * float -> FP8 rounds to nearest, ties to even, on the subnormals too.
//   * Saturation::kSatFinite (what every quantizer uses): clamp to ±max first,
//     so overflow and ±inf give ±max; NaN stays NaN with its sign.
//   * Saturation::kTorchCast reproduces PyTorch's plain `.to(float8_*)`: no clamp;
//     E4M3 turns |x| > 464 into NaN, E5M2 turns |x| >= 61440 into ±inf.
//
// Everything here is header-only and constexpr-friendly so the vectorized
// kernels, the tests and the CUDA backend can share the exact same definition.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

namespace fp8lm {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

enum class Saturation : uint8_t {
  kSatFinite,  // clamp to ±max before rounding (quantizers, cuda __NV_SATFINITE)
  kTorchCast,  // PyTorch's plain cast: overflow -> NaN (E4M3) or inf (E5M2)
};

// Static description of a format; all bit-level constants derive from it.
struct Fp8Traits {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max_finite;          // 448 or 57344
  uint8_t max_code;          // positive code of max_finite
  uint8_t nan_code;          // positive NaN code produced by conversions
  float min_normal;          // 2^(1-bias)
  // PyTorch's cast: |x| at or above this (as float bits) overflows directly.
  uint32_t torch_overflow_bits;
  uint8_t torch_overflow_code;  // what that overflow becomes (NaN or inf)
};

inline constexpr Fp8Traits kE4M3Traits{4, 3, 7, 448.0f, 0x7E, 0x7F, 0.015625f,
                                       0x43F00000u /* 480.0 */, 0x7F};
inline constexpr Fp8Traits kE5M2Traits{5, 2, 15, 57344.0f, 0x7B, 0x7F, 6.103515625e-05f,
                                       0x47800000u /* 65536.0 */, 0x7C};

constexpr const Fp8Traits& traits(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? kE4M3Traits : kE5M2Traits;
}

constexpr std::string_view name(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}

// ---------------------------------------------------------------------------
// bfloat16 (stored as uint16_t bit patterns)

constexpr float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

// Round-to-nearest-even, as PyTorch's c10::BFloat16 does: every NaN becomes the
// canonical quiet NaN 0x7FC0 (the sign is dropped, exactly like PyTorch).
constexpr uint16_t float_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

// Rounds a float to the nearest bfloat16 value and returns it as float.
constexpr float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// ---------------------------------------------------------------------------
// float32 -> FP8

namespace detail {

// |x| < min_normal: round |x| to a multiple of the subnormal step (2^-9 / 2^-16)
// by adding a power of two whose float ulp *is* that step; the FPU's own
// round-to-nearest-even does the rounding. A result of 1<<mantissa_bits lands
// exactly on the smallest normal code, which is what we want.
constexpr uint8_t encode_subnormal(float abs_x, const Fp8Traits& t) {
  const int step_exp = 1 - t.bias - t.mantissa_bits;  // log2 of the subnormal step
  const float magic = std::bit_cast<float>(uint32_t(127 + step_exp + 23) << 23);
  const float sum = abs_x + magic;
  return static_cast<uint8_t>(std::bit_cast<uint32_t>(sum) - std::bit_cast<uint32_t>(magic));
}

// |x| is normal in the FP8 format: round the float32 mantissa to mantissa_bits
// with ties to even, then re-bias the exponent.
constexpr uint8_t encode_normal(uint32_t abs_bits, const Fp8Traits& t) {
  const int shift = 23 - t.mantissa_bits;
  const uint32_t odd = (abs_bits >> shift) & 1u;
  abs_bits += ((1u << (shift - 1)) - 1u) + odd;
  return static_cast<uint8_t>((abs_bits >> shift) -
                              (uint32_t(127 - t.bias) << t.mantissa_bits));
}

}  // namespace detail

constexpr uint8_t float_to_fp8(float x, Fp8Format fmt, Saturation sat = Saturation::kSatFinite) {
  const Fp8Traits& t = traits(fmt);
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return sign | t.nan_code;  // NaN keeps its sign
  if (sat == Saturation::kSatFinite) {
    if (abs_bits > std::bit_cast<uint32_t>(t.max_finite)) return sign | t.max_code;
  } else if (abs_bits >= t.torch_overflow_bits) {
    return sign | t.torch_overflow_code;
  }
  const float abs_x = std::bit_cast<float>(abs_bits);
  if (abs_x < t.min_normal) return sign | detail::encode_subnormal(abs_x, t);
  return sign | detail::encode_normal(abs_bits, t);
}

constexpr uint8_t bf16_to_fp8(uint16_t b, Fp8Format fmt, Saturation sat = Saturation::kSatFinite) {
  return float_to_fp8(bf16_to_float(b), fmt, sat);
}

// ---------------------------------------------------------------------------
// FP8 -> float32 (exact: every FP8 value is a float32 value)

constexpr float fp8_to_float(uint8_t code, Fp8Format fmt) {
  const Fp8Traits& t = traits(fmt);
  const bool negative = (code & 0x80u) != 0;
  const uint32_t exp_field = (code & 0x7Fu) >> t.mantissa_bits;
  const uint32_t man_field = code & ((1u << t.mantissa_bits) - 1u);
  const uint32_t exp_max = (1u << t.exponent_bits) - 1u;
  const uint32_t sign_bits = negative ? 0x80000000u : 0u;
  if (fmt == Fp8Format::kE4M3) {
    if (exp_field == exp_max && man_field == ((1u << t.mantissa_bits) - 1u))
      return std::bit_cast<float>(sign_bits | 0x7FC00000u);
  } else if (exp_field == exp_max) {
    return std::bit_cast<float>(sign_bits | (man_field == 0 ? 0x7F800000u : 0x7FC00000u));
  }
  float magnitude;
  if (exp_field == 0) {
    // subnormal: man × 2^(1 - bias - mantissa_bits), exact in float
    const int step_exp = 1 - t.bias - t.mantissa_bits;
    magnitude = static_cast<float>(man_field) * std::bit_cast<float>(uint32_t(127 + step_exp) << 23);
  } else {
    const uint32_t f32_exp = exp_field - uint32_t(t.bias) + 127u;
    magnitude = std::bit_cast<float>((f32_exp << 23) | (man_field << (23 - t.mantissa_bits)));
  }
  return negative ? -magnitude : magnitude;
}

constexpr bool fp8_is_nan(uint8_t code, Fp8Format fmt) {
  return fmt == Fp8Format::kE4M3 ? (code & 0x7Fu) == 0x7Fu : (code & 0x7Fu) > 0x7Cu;
}

}  // namespace fp8lm
