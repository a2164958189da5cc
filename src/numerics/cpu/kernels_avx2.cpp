// AVX2 loops: 8 floats per step. Compiled with -mavx2 (this file only)
// and used only when the CPU reports AVX2 (BF16 widening is a shift, so F16C
// is not needed). The FP8 encoding is the
// integer algorithm of fp8_format.h, done on 8 lanes with blends; division and
// the subnormal "magic add" use the same IEEE round-to-nearest-even as scalar
// code, so the bytes are identical.
#include <immintrin.h>

#include <bit>
#include <cmath>

#include "numerics/cpu/kernels.h"

namespace fp8lm::cpu {
namespace {

// Loads 8 elements as float (bf16 widened exactly by a 16-bit shift).
__m256 load8(const void* x, HighPrecision dtype, size_t i) {
  if (dtype == HighPrecision::kF32) return _mm256_loadu_ps(static_cast<const float*>(x) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
      static_cast<const uint16_t*>(x) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// float -> bf16 -> float, RNE, NaN -> canonical 0x7FC00000 (as float_to_bf16).
__m256i round_bits_to_bf16(__m256i bits) {
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  r = _mm256_and_si256(r, _mm256_set1_epi32(int(0xFFFF0000u)));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), nan);
}

// 8 float bit patterns -> 8 FP8 codes in the low byte of each 32-bit lane.
__m256i encode8(__m256i bits, const Fp8Traits& t, Saturation sat) {
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));

  // normal range: round the mantissa, re-bias the exponent
  const int shift = 23 - t.mantissa_bits;
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(abs, shift), _mm256_set1_epi32(1));
  __m256i normal = _mm256_add_epi32(abs, _mm256_set1_epi32((1 << (shift - 1)) - 1));
  normal = _mm256_srli_epi32(_mm256_add_epi32(normal, odd), shift);
  normal = _mm256_sub_epi32(normal, _mm256_set1_epi32((127 - t.bias) << t.mantissa_bits));

  // subnormal range: let the FPU round |x| + 2^(step + 23)
  const int step_exp = 1 - t.bias - t.mantissa_bits;
  const __m256i magic_bits = _mm256_set1_epi32((127 + step_exp + 23) << 23);
  const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(abs), _mm256_castsi256_ps(magic_bits));
  const __m256i subnormal = _mm256_sub_epi32(_mm256_castps_si256(sum), magic_bits);
  const __m256i is_sub =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::bit_cast<uint32_t>(t.min_normal))), abs);

  __m256i code = _mm256_blendv_epi8(normal, subnormal, is_sub);
  if (sat == Saturation::kSatFinite) {
    const __m256i over =
        _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(int(std::bit_cast<uint32_t>(t.max_finite))));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(t.max_code), over);
  } else {
    const __m256i over = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(int(t.torch_overflow_bits - 1)));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(t.torch_overflow_code), over);
  }
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(t.nan_code), nan);
  return _mm256_or_si256(code, sign);
}

// Low bytes of 8 lanes -> 8 consecutive bytes.
void store8(__m256i code, uint8_t* out) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1);
  const __m256i packed = _mm256_shuffle_epi8(code, pick);
  const __m128i lo = _mm256_castsi256_si128(packed);
  const __m128i hi = _mm256_extracti128_si256(packed, 1);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi32(lo, hi));
}

// 8 FP8 codes -> 8 floats, exactly (see fp8_to_float).
__m256 decode8(const uint8_t* codes, Fp8Format format) {
  const Fp8Traits& t = traits(format);
  const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  const __m256i mag_code = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
  // Place exponent and mantissa in float position; multiplying by
  // 2^(127 - bias) re-biases normals and scales subnormals exactly.
  const __m256 shifted = _mm256_castsi256_ps(_mm256_slli_epi32(mag_code, 23 - t.mantissa_bits));
  const __m256 rebias = _mm256_castsi256_ps(_mm256_set1_epi32((127 + 127 - t.bias) << 23));
  __m256i mag = _mm256_castps_si256(_mm256_mul_ps(shifted, rebias));
  if (format == Fp8Format::kE4M3) {
    const __m256i nan = _mm256_cmpeq_epi32(mag_code, _mm256_set1_epi32(0x7F));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7FC00000), nan);
  } else {
    const __m256i inf = _mm256_cmpeq_epi32(mag_code, _mm256_set1_epi32(0x7C));
    const __m256i nan = _mm256_cmpgt_epi32(mag_code, _mm256_set1_epi32(0x7C));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7F800000), inf);
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7FC00000), nan);
  }
  return _mm256_castsi256_ps(_mm256_or_si256(mag, sign));
}

float amax_avx2(const void* x, HighPrecision dtype, size_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // max_ps returns its second operand when the first is NaN: NaNs are skipped
    m = _mm256_max_ps(_mm256_and_ps(load8(x, dtype, i), abs_mask), m);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = scalar_kernels().amax(advance(x, dtype, i), dtype, n - i);
  for (float v : lanes) r = v > r ? v : r;
  return r;
}

void quantize_avx2(const void* x, HighPrecision dtype, size_t n, float scale,
                   const QuantizeArgs& args, uint8_t* out) {
  const Fp8Traits& t = traits(args.format);
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i q = _mm256_castps_si256(_mm256_div_ps(load8(x, dtype, i), s));
    if (args.quotient == HighPrecision::kBF16) q = round_bits_to_bf16(q);
    if (args.add_zero) q = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(q), _mm256_setzero_ps()));
    store8(encode8(q, t, args.saturation), out + i);
  }
  scalar_kernels().quantize(advance(x, dtype, i), dtype, n - i, scale, args, out + i);
}

void dequantize_f32_avx2(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                         float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(decode8(codes + i, format), s));
  scalar_kernels().dequantize_f32(codes + i, n - i, scale, format, out + i);
}

void dequantize_bf16_avx2(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                          uint16_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_srli_epi32(
        round_bits_to_bf16(_mm256_castps_si256(_mm256_mul_ps(decode8(codes + i, format), s))), 16);
    // 8 × u32 (< 2^16) -> 8 × u16
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  scalar_kernels().dequantize_bf16(codes + i, n - i, scale, format, out + i);
}

}  // namespace

const KernelTable* avx2_kernels() {
  static const bool supported = __builtin_cpu_supports("avx2");
  static const KernelTable table{"avx2", amax_avx2, quantize_avx2, dequantize_f32_avx2,
                                 dequantize_bf16_avx2};
  return supported ? &table : nullptr;
}

}  // namespace fp8lm::cpu
