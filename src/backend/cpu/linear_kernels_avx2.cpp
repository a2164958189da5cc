// AVX2 + FMA (+F16C) inner loops of the linear layer (8 float lanes). Compiled
// with those flags for this file only and used only after a run-time CPU check.
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
    for (; i + 8 <= n; i += 8) {
      const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
      _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; ++i) out[i] = bf16_to_float(p[i]);
  } else {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
    }
    for (; i < n; ++i) out[i] = f16_to_float(p[i]);
  }
}

// Same exact decode as the AVX-512 table (see there): magnitude bits under the
// float exponent, × 2^(127 - bias), × scale.
void fp8_to_float(const uint8_t* codes, int64_t n, Fp8Format format, float scale, float* out) {
  const Fp8Traits& t = traits(format);
  const __m128i shift = _mm_cvtsi32_si128(23 - t.mantissa_bits);
  const __m256 rebias = _mm256_set1_ps(format == Fp8Format::kE4M3 ? 0x1p120f : 0x1p112f);
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i sign_mask = _mm256_set1_epi32(0x80);
  const __m256i mag_mask = _mm256_set1_epi32(0x7F);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    int64_t bytes;
    std::memcpy(&bytes, codes + i, 8);
    const __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, sign_mask), 24);
    const __m256i mag = _mm256_sll_epi32(_mm256_and_si256(c, mag_mask), shift);
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_castsi256_ps(mag), rebias), s);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign)));
  }
  for (; i < n; ++i) out[i] = fp8lm::fp8_to_float(codes[i], format) * scale;
}

// Fixed-order horizontal sum of 8 lanes.
float reduce(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

alignas(32) constexpr int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// As the AVX-512 table: MR × NR accumulators, a masked K tail, so each
// output's sum depends only on (x row, w row, len).
template <int MR, int NR>
void dot(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len, float* out) {
  __m256 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= len; k += 8) {
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(w + j * ldw + k);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + k);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (k < len) {
    const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - (len - k)));
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_maskload_ps(w + j * ldw + k, mask);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_maskload_ps(x + i * ldx + k, mask);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) out[i * NR + j] = reduce(acc[i][j]);
}

}  // namespace

const LinearKernels* linear_kernels_avx2() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                __builtin_cpu_supports("f16c");
  // 4 × 3: 12 accumulators + 3 weight vectors + 1 input vector = all 16 registers.
  static const LinearKernels table{"avx2", to_float, fp8_to_float, 4, 3,
                                   FP8LM_LINEAR_DOT_TABLE(dot)};
  return supported ? &table : nullptr;
}

}  // namespace fp8lm::cpu
