// Device-side FP8 conversions that meet docs/numerics.md bit for bit.
//
// The hardware converter (cvt.rn.satfinite / cvt.rn on sm_89+, reached through
// __nv_cvt_float_to_fp8) rounds to nearest-even exactly like the CPU reference,
// with one difference: it returns the positive NaN code for every NaN. PyTorch
// and fp8lm keep the NaN's sign, so the sign is put back here.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "numerics/fp8_format.h"

namespace fp8lm::cuda {

__device__ __forceinline__ uint8_t device_float_to_fp8(float x, Fp8Format format, Saturation sat) {
  const __nv_fp8_interpretation_t interp = format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __nv_saturation_t mode = sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT;
  auto code = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, mode, interp));
  if (isnan(x) && signbit(x)) code |= 0x80u;
  return code;
}

__device__ __forceinline__ float device_fp8_to_float(uint8_t code, Fp8Format format) {
  const __nv_fp8_interpretation_t interp = format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), interp);
  return __half2float(__half(h));
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

}  // namespace fp8lm::cuda
