// The tensor-core fragments of the weight-streaming GEMVs (.cu only), shared by fp8_gemv.cu and
// the persistent decode kernel (persistent/decode_kernel.cu), so that both expand E4M3 codes and
// multiply them the same way: E4M3 codes moved into FP16 / BF16 halves without a conversion
// instruction, and the m16n8k16 MMA with float32 accumulators.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

namespace fp8lm::cuda {

// Four E4M3 codes (b0 in the low byte) → (b0, b2) and (b1, b3) as 16-bit pairs:
//   FP16 (kA8): value × 2^-8 — the code's exponent and mantissa moved into place
//     (subnormal codes land on FP16 subnormals with the same scaling).
//   BF16: value × 2^-120 the same way, then × 2^120 (exact: a power of two, no overflow).
template <bool kA8>
__device__ __forceinline__ void expand(uint32_t q, uint32_t& p02, uint32_t& p13) {
  constexpr int kShift = kA8 ? 1 : 4;
  const uint32_t q8 = q << 8;
  p13 = (q & 0x80008000u) | ((q & 0x7F007F00u) >> kShift);
  p02 = (q8 & 0x80008000u) | ((q8 & 0x7F007F00u) >> kShift);
  if constexpr (!kA8) {
    const __nv_bfloat162 k2p120 = __halves2bfloat162(__ushort_as_bfloat16(0x7B80), __ushort_as_bfloat16(0x7B80));
    __nv_bfloat162 a, b;
    std::memcpy(&a, &p02, 4);
    std::memcpy(&b, &p13, 4);
    a = __hmul2(a, k2p120);
    b = __hmul2(b, k2p120);
    std::memcpy(&p02, &a, 4);
    std::memcpy(&p13, &b, 4);
  }
}

template <bool kA8>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  if constexpr (kA8) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Two E4M3 codes (lo, hi bytes of `pair`) → exact FP16 values, lo in the low half.
__device__ __forceinline__ uint32_t codes_to_f16x2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

}  // namespace fp8lm::cuda
