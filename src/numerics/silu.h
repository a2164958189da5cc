// SiLU·mul that gives the same float32 bits on the CPU and on the GPU.
//
// `g / (1 + exp(-g)) * u` is only as reproducible as its exp: glibc's expf
// (≤ 0.502 ulp; x86-64 glibc picks an FMA or a non-FMA build of it at run time)
// and CUDA's expf (≤ 2 ulp) disagree in the last bit on a sizeable fraction of
// inputs. So fp8lm computes exp itself, the same IEEE float32 operations in the
// same order on both sides, no FMA, no double, no special-function unit:
//
//   kf = rint(x · 32/ln2),  r = x − kf·(ln2/32)_hi − kf·(ln2/32)_lo   (the first product and
//   difference exact),  exp(x) = 2^(kf>>5) · 2^((kf&31)/32) · (1 + r + r²(1/2 + r/6)),
//
// with 2^(j/32) as a float pair hi + lo. The result is the correctly rounded
// exp(x) but for about 1 input in 2,000, which is one ulp off (measured over
// every float in [-110, 95] against expl),
// subnormal results and overflow to +inf included. Each operation is its own
// statement on the host (the build has -ffp-contract=off; even contraction "on"
// never fuses across statements) and an explicit _rn intrinsic on the device
// (nvcc contracts by default).
//
// NaN: any NaN result of silu_mul_f32 is returned as the positive quiet NaN
// 0x7FC00000. (The CPU's and the GPU's arithmetic give NaNs different signs:
// x86 makes −inf/inf the negative "default NaN", CUDA the positive canonical
// one; FP8 conversion keeps the sign, so it is fixed here.)
//
// Usable from plain C++ (the CPU backend) and from CUDA device code.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP8LM_HOST_DEVICE __host__ __device__
#else
#define FP8LM_HOST_DEVICE
#include <cmath>
#endif

namespace fp8lm::silu_detail {

FP8LM_HOST_DEVICE inline float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FP8LM_HOST_DEVICE inline float fsub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FP8LM_HOST_DEVICE inline float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FP8LM_HOST_DEVICE inline float fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FP8LM_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
FP8LM_HOST_DEVICE inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// 2^(j/32) = hi + lo, j = 0..31: hi the float nearest, lo the float nearest the rest.
FP8LM_HOST_DEVICE inline float exp2_32nd_hi(int j) {
  static constexpr float kHi[32] = {
      0x1.000000p+0f, 0x1.059b0ep+0f, 0x1.0b5586p+0f, 0x1.11301ep+0f, 0x1.172b84p+0f, 0x1.1d4874p+0f,
      0x1.2387a6p+0f, 0x1.29e9e0p+0f, 0x1.306fe0p+0f, 0x1.371a74p+0f, 0x1.3dea64p+0f, 0x1.44e086p+0f,
      0x1.4bfdaep+0f, 0x1.5342b6p+0f, 0x1.5ab07ep+0f, 0x1.6247ecp+0f, 0x1.6a09e6p+0f, 0x1.71f75ep+0f,
      0x1.7a1148p+0f, 0x1.82589ap+0f, 0x1.8ace54p+0f, 0x1.93737cp+0f, 0x1.9c4918p+0f, 0x1.a5503cp+0f,
      0x1.ae89fap+0f, 0x1.b7f770p+0f, 0x1.c199bep+0f, 0x1.cb720ep+0f, 0x1.d5818ep+0f, 0x1.dfc974p+0f,
      0x1.ea4afap+0f, 0x1.f50766p+0f};
  return kHi[j];
}
FP8LM_HOST_DEVICE inline float exp2_32nd_lo(int j) {
  static constexpr float kLo[32] = {
      0x0.0p+0f,        -0x1.9d4f52p-25f, 0x1.9f3122p-25f,  -0x1.fdb496p-25f, -0x1.c15742p-27f, -0x1.d2e8cap-25f,
      0x1.ceac48p-25f,  -0x1.5c0424p-25f, 0x1.4636e2p-25f,  -0x1.18aac6p-25f, 0x1.824684p-25f,  0x1.8624b4p-30f,
      -0x1.593abcp-25f, -0x1.2c5610p-25f, -0x1.5bd5ecp-27f, -0x1.f8b550p-25f, 0x1.9fcef4p-26f,  0x1.1d8beep-25f,
      -0x1.829fd0p-25f, -0x1.accc7cp-26f, 0x1.15506ep-27f,  -0x1.e64744p-25f, 0x1.51f848p-27f,  -0x1.b83b54p-25f,
      -0x1.a94b14p-26f, -0x1.a09438p-25f, -0x1.3d56b2p-27f, -0x1.8837ccp-27f, -0x1.822dbcp-27f, -0x1.908c94p-25f,
      0x1.52486cp-27f,  -0x1.246eb0p-26f};
  return kLo[j];
}

FP8LM_HOST_DEVICE inline float quiet_nan() { return bits_float(0x7FC00000u); }

FP8LM_HOST_DEVICE inline float pow2(int32_t e) {  // 2^e for a normal exponent
  return bits_float(static_cast<uint32_t>(e + 127) << 23);
}

}  // namespace fp8lm::silu_detail

namespace fp8lm {

// exp(x) for a float x, as described above. ±inf give +inf / +0; a NaN gives a NaN.
FP8LM_HOST_DEVICE inline float exp_f32(float x) {
  using namespace silu_detail;
  // Beyond these exp rounds to 0 or overflows; the clamp keeps kf small.
  if (x < -104.0f) x = -104.0f;
  if (x > 89.0f) x = 89.0f;
  constexpr float kInvL = 0x1.715476p+5f;   // 32 / ln 2
  constexpr float kMagic = 0x1.8p+23f;      // t + kMagic rounds t to an integer, ties to even
  constexpr float kLHi = 0x1.63p-6f;        // ln2/32 to 11 bits: kf · kLHi is exact for |kf| < 2^13
  constexpr float kLLo = -0x1.bd0106p-18f;  // ln2/32 − kLHi
  constexpr float kC3 = 0x1.555556p-3f;     // 1/6
  const float t = fmul(x, kInvL);
  const float big = fadd(t, kMagic);
  const float kf = fsub(big, kMagic);
  const auto ki = static_cast<int32_t>(float_bits(big) - float_bits(kMagic));  // kf as an integer
  const float p_hi = fmul(kf, kLHi);
  const float r_hi = fsub(x, p_hi);  // exact (Sterbenz)
  const float p_lo = fmul(kf, kLLo);
  const float r = fsub(r_hi, p_lo);  // |r| ≤ ln2/64 (+ rounding)
  const float a = fmul(r, kC3);
  const float b = fadd(a, 0.5f);
  const float r2 = fmul(r, r);
  const float c = fmul(r2, b);
  const float em1 = fadd(c, r);      // exp(r) − 1
  const int j = static_cast<int>(ki & 31);
  const float hi = exp2_32nd_hi(j);
  const float d = fmul(hi, em1);
  const float d2 = fadd(d, exp2_32nd_lo(j));
  const float y = fadd(hi, d2);      // 2^(j/32) · exp(r), in [0.98, 2.03]
  const int32_t e = ki >> 5;         // floor(kf / 32), in [-151, 128]
  const int32_t e1 = e >> 1;
  const int32_t e2 = e - e1;
  const float y1 = fmul(y, pow2(e1));  // exact: stays normal
  return fmul(y1, pow2(e2));           // the one rounding for subnormal results, or +inf
}

// silu(g) · u = g / (1 + exp(-g)) · u in float32, the formula of the CPU
// backend's silu_mul with exp_f32 for its exp; every NaN result is +qNaN.
FP8LM_HOST_DEVICE inline float silu_mul_f32(float g, float u) {
  using namespace silu_detail;
  if (g != g) return quiet_nan();
  const float e = exp_f32(-g);
  const float d = fadd(1.0f, e);
  const float q = fdiv(g, d);
  const float s = fmul(q, u);
  return s != s ? quiet_nan() : s;
}

}  // namespace fp8lm
