// Per-element FP8 activation quantization on the device, shared by the
// quantization kernels (quant_kernels.cu) and the GEMV that quantizes its own
// input (fp8_gemv.cu), so that both write the same codes bit for bit — those of
// numerics/quantize.cpp (docs/numerics.md): the scale from amax in float32 with
// the rule's floors, the quotient by IEEE division, saturating round-to-nearest
// with the NaN's sign kept.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/cuda/quant/scale_rule.h"

namespace fp8lm::cuda {

// numerics/quantize.cpp's scale_from_amax.
__device__ __forceinline__ float scale_from_amax(float amax, const Fp8ScaleRule& r) {
  const float a = fmaxf(amax, r.amax_floor);
  float s = __fdiv_rn(a, r.fmax);
  s = fmaxf(s, r.scale_floor);
  if (r.scale_cap > 0.0f) s = fmaxf(fminf(s, r.scale_cap), r.scale_floor);
  return s;
}

// code = fp8(clamp(v / s)). A NaN keeps its sign (CUDA's division would make
// it the positive canonical NaN); a NaN made by the division itself (±inf /
// inf) becomes x86's default NaN 0xFFC00000, as the CPU reference's divss.
__device__ __forceinline__ uint8_t quantize1(float v, float s, Fp8Format format) {
  float q = v;
  if (!isnan(v)) {
    q = __fdiv_rn(v, s);
    if (isnan(q)) q = __uint_as_float(0xFFC00000u);
  }
  return device_float_to_fp8(q, format, Saturation::kSatFinite);
}

// The codes of 8 values under one finite scale: IEEE division, the converter
// two values at a time, then every value's sign bit OR-ed into its code. For a
// non-NaN value that is a no-op (its code carries its sign, −0 and values that
// round to zero included; the scale is > 0); for a NaN, whose quotient the GPU
// makes the positive canonical NaN (code 0x7F), it puts the NaN's sign back.
__device__ __forceinline__ uint2 quantize8_finite_scale(const float (&v)[8], float s, Fp8Format format) {
  const __nv_fp8_interpretation_t interp = format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  uint32_t pair[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 q = make_float2(__fdiv_rn(v[2 * i], s), __fdiv_rn(v[2 * i + 1], s));
    pair[i] = __nv_cvt_float2_to_fp8x2(q, __NV_SATFINITE, interp);  // low byte: q.x
  }
  const auto b = [&](int j) { return __float_as_uint(v[j]); };
  const uint32_t sign_lo = __byte_perm(__byte_perm(b(0), b(1), 0x73), __byte_perm(b(2), b(3), 0x73), 0x5410);
  const uint32_t sign_hi = __byte_perm(__byte_perm(b(4), b(5), 0x73), __byte_perm(b(6), b(7), 0x73), 0x5410);
  return make_uint2((pair[0] | (pair[1] << 16)) | (sign_lo & 0x80808080u),
                    (pair[2] | (pair[3] << 16)) | (sign_hi & 0x80808080u));
}

// 8 codes under any scale: an infinite scale (amax = inf) takes quantize1, so
// that ±inf / inf gives x86's default NaN.
__device__ __forceinline__ uint2 quantize8(const float (&v)[8], float s, Fp8Format format) {
  if (s < INFINITY) return quantize8_finite_scale(v, s, format);
  uint8_t c[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) c[j] = quantize1(v[j], s, format);
  return make_uint2(uint32_t(c[0]) | (uint32_t(c[1]) << 8) | (uint32_t(c[2]) << 16) | (uint32_t(c[3]) << 24),
                    uint32_t(c[4]) | (uint32_t(c[5]) << 8) | (uint32_t(c[6]) << 16) | (uint32_t(c[7]) << 24));
}

}  // namespace fp8lm::cuda
