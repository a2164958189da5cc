// AVX-512 loops: 16 floats per step, mask registers instead of blends.
// Compiled with -mavx512f -mavx512bw (this file only), used only when the CPU
// reports both. Same algorithm, same bytes as the scalar loops.
#include <immintrin.h>

#include <bit>

#include "numerics/cpu/kernels.h"

namespace fp8lm::cpu {
namespace {

__m512 load16(const void* x, HighPrecision dtype, size_t i) {
  if (dtype == HighPrecision::kF32) return _mm512_loadu_ps(static_cast<const float*>(x) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
      static_cast<const uint16_t*>(x) + i));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

__m512i set1(uint32_t v) { return _mm512_set1_epi32(int(v)); }

__m512i round_bits_to_bf16(__m512i bits) {
  const __m512i abs = _mm512_and_si512(bits, set1(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, set1(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), set1(1));
  __m512i r = _mm512_add_epi32(bits, _mm512_add_epi32(set1(0x7FFF), lsb));
  r = _mm512_and_si512(r, set1(0xFFFF0000u));
  return _mm512_mask_mov_epi32(r, nan, set1(0x7FC00000));
}

__m512i encode16(__m512i bits, const Fp8Traits& t, Saturation sat) {
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), set1(0x80));
  const __m512i abs = _mm512_and_si512(bits, set1(0x7FFFFFFF));

  const int shift = 23 - t.mantissa_bits;
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(abs, shift), set1(1));
  __m512i code = _mm512_add_epi32(abs, set1((1u << (shift - 1)) - 1u));
  code = _mm512_srli_epi32(_mm512_add_epi32(code, odd), shift);
  code = _mm512_sub_epi32(code, set1(uint32_t(127 - t.bias) << t.mantissa_bits));

  const int step_exp = 1 - t.bias - t.mantissa_bits;
  const __m512i magic_bits = set1(uint32_t(127 + step_exp + 23) << 23);
  const __m512 sum = _mm512_add_ps(_mm512_castsi512_ps(abs), _mm512_castsi512_ps(magic_bits));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(abs, set1(std::bit_cast<uint32_t>(t.min_normal)));
  code = _mm512_mask_mov_epi32(code, is_sub, _mm512_sub_epi32(_mm512_castps_si512(sum), magic_bits));

  if (sat == Saturation::kSatFinite) {
    const __mmask16 over = _mm512_cmpgt_epi32_mask(abs, set1(std::bit_cast<uint32_t>(t.max_finite)));
    code = _mm512_mask_mov_epi32(code, over, set1(t.max_code));
  } else {
    const __mmask16 over = _mm512_cmpge_epi32_mask(abs, set1(t.torch_overflow_bits));
    code = _mm512_mask_mov_epi32(code, over, set1(t.torch_overflow_code));
  }
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, set1(0x7F800000));
  code = _mm512_mask_mov_epi32(code, nan, set1(t.nan_code));
  return _mm512_or_si512(code, sign);
}

__m512 decode16(const uint8_t* codes, Fp8Format format) {
  const Fp8Traits& t = traits(format);
  const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, set1(0x80)), 24);
  const __m512i mag_code = _mm512_and_si512(c, set1(0x7F));
  const __m512 shifted = _mm512_castsi512_ps(_mm512_slli_epi32(mag_code, 23 - t.mantissa_bits));
  const __m512 rebias = _mm512_castsi512_ps(set1(uint32_t(127 + 127 - t.bias) << 23));
  __m512i mag = _mm512_castps_si512(_mm512_mul_ps(shifted, rebias));
  if (format == Fp8Format::kE4M3) {
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpeq_epi32_mask(mag_code, set1(0x7F)), set1(0x7FC00000));
  } else {
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpeq_epi32_mask(mag_code, set1(0x7C)), set1(0x7F800000));
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpgt_epi32_mask(mag_code, set1(0x7C)), set1(0x7FC00000));
  }
  return _mm512_castsi512_ps(_mm512_or_si512(mag, sign));
}

float amax_avx512(const void* x, HighPrecision dtype, size_t n) {
  __m512 m = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(load16(x, dtype, i)), m);
  const float r = _mm512_reduce_max_ps(m);
  const float tail = scalar_kernels().amax(advance(x, dtype, i), dtype, n - i);
  return tail > r ? tail : r;
}

void quantize_avx512(const void* x, HighPrecision dtype, size_t n, float scale,
                     const QuantizeArgs& args, uint8_t* out) {
  const Fp8Traits& t = traits(args.format);
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i q = _mm512_castps_si512(_mm512_div_ps(load16(x, dtype, i), s));
    if (args.quotient == HighPrecision::kBF16) q = round_bits_to_bf16(q);
    if (args.add_zero) q = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(q), _mm512_setzero_ps()));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm512_cvtepi32_epi8(encode16(q, t, args.saturation)));
  }
  scalar_kernels().quantize(advance(x, dtype, i), dtype, n - i, scale, args, out + i);
}

void dequantize_f32_avx512(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                           float* out) {
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(decode16(codes + i, format), s));
  scalar_kernels().dequantize_f32(codes + i, n - i, scale, format, out + i);
}

void dequantize_bf16_avx512(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                            uint16_t* out) {
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i b = _mm512_srli_epi32(
        round_bits_to_bf16(_mm512_castps_si512(_mm512_mul_ps(decode16(codes + i, format), s))), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(b));
  }
  scalar_kernels().dequantize_bf16(codes + i, n - i, scale, format, out + i);
}

}  // namespace

const KernelTable* avx512_kernels() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  static const KernelTable table{"avx512", amax_avx512, quantize_avx512, dequantize_f32_avx512,
                                 dequantize_bf16_avx512};
  return supported ? &table : nullptr;
}

}  // namespace fp8lm::cpu
