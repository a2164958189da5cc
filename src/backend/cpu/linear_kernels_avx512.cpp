// AVX-512F inner loops of the linear layer (16 float lanes, FMA). Compiled with
// -mavx512f for this file only and used only after a run-time CPU check.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/linear_kernels.h"

namespace fp8lm::cpu {
namespace {

void to_float(const void* src, ElementType element, int64_t n, float* out) {
  if (element == ElementType::kF32) {
    std::memcpy(out, src, size_t(n) * sizeof(float));
    return;
  }
  const auto* p = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (element == ElementType::kBF16) {
    for (; i + 16 <= n; i += 16) {
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) out[i] = bf16_to_float(p[i]);
  } else {
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i))));
    }
    for (; i < n; ++i) out[i] = f16_to_float(p[i]);
  }
}

// An FP8 code's magnitude bits shifted under a float32's exponent field read as
// a float that is the FP8 value × 2^-(127 - bias) — exactly, subnormals included
// (they become float subnormals) — so one multiply by that power of two
// decodes it, and one more applies the scale: the numerics dequantize's product.
void fp8_to_float(const uint8_t* codes, int64_t n, Fp8Format format, float scale, float* out) {
  const Fp8Traits& t = traits(format);
  const __m128i shift = _mm_cvtsi32_si128(23 - t.mantissa_bits);
  const __m512 rebias = _mm512_set1_ps(format == Fp8Format::kE4M3 ? 0x1p120f : 0x1p112f);
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i sign_mask = _mm512_set1_epi32(0x80);
  const __m512i mag_mask = _mm512_set1_epi32(0x7F);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, sign_mask), 24);
    const __m512i mag = _mm512_sll_epi32(_mm512_and_si512(c, mag_mask), shift);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_castsi512_ps(mag), rebias), s);
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign)));
  }
  for (; i < n; ++i) out[i] = fp8lm::fp8_to_float(codes[i], format) * scale;
}

// MR × NR accumulators of 16 lanes each; the K tail is a masked load, so every
// element goes through the same lanes whatever the tile: each output's sum
// depends only on (x row, w row, len).
template <int MR, int NR>
void dot(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len, float* out) {
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= len; k += 16) {
    __m512 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_ps(w + j * ldw + k);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + k);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < len) {
    const auto mask = static_cast<__mmask16>((1u << (len - k)) - 1u);
    __m512 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(mask, w + j * ldw + k);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + k);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) out[i * NR + j] = _mm512_reduce_add_ps(acc[i][j]);
}

}  // namespace

const LinearKernels* linear_kernels_avx512() {
  static const bool supported = __builtin_cpu_supports("avx512f");
  // 4 × 4: 16 accumulators + 4 weight vectors + 1 input vector of 32 registers.
  static const LinearKernels table{"avx512", to_float, fp8_to_float, 4, 4,
                                   FP8LM_LINEAR_DOT_TABLE(dot)};
  return supported ? &table : nullptr;
}

}  // namespace fp8lm::cpu
