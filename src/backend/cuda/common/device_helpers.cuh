// Device helpers shared by the kernel files (.cu only): BF16 rounding exactly
// as the CPU reference (fp8lm::float_to_bf16), 8-element vector loads and
// stores, and the cp.async primitives. One copy of each, so that every kernel
// rounds and loads the same way: the GPU tests compare against the CPU bit for
// bit, and two copies that drift apart would pass one test and fail another.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/fp8_convert.cuh"

namespace fp8lm::cuda {

// The canonical BF16 NaN, the one float_to_bf16 gives for every NaN.
inline constexpr uint16_t kBf16Nan = 0x7FC0;

// Host side: whether a pointer allows the 16-byte vector loads and stores (and TMA rows) below.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- BF16 ----------------------------------------------------------------------------

// float -> BF16 bits exactly as fp8lm::float_to_bf16 (RNE, every NaN 0x7FC0).
__device__ __forceinline__ uint32_t bf16_bits(float f) {
  const uint32_t b = __float_as_uint(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return kBf16Nan;
  return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ float round_bf16(float f) { return __uint_as_float(bf16_bits(f) << 16); }

// ---- 8-element vectors -------------------------------------------------------------------

// n (≤ 8) consecutive elements at p into v, zeros after them; kVec: all 8, one 16-byte load.
// 16 bytes of weights streamed once (the GEMVs): kept out of L1; the 256-byte L2 prefetch hint
// brings the rest of the row segment read next.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 8 BF16 values held in 16 bytes (the first in the low half of r.x) as floats.
__device__ __forceinline__ void bf16x8_to_float(const uint4& r, float (&v)[8]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = __uint_as_float(w[j] << 16);
    v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
  }
}

template <bool kVec>
__device__ __forceinline__ void load8(const uint16_t* p, int n, float (&v)[8]) {
  if constexpr (kVec) {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(p), v);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = j < n ? bf16_bits_to_float(p[j]) : 0.0f;
  }
}

template <bool kVec>
__device__ __forceinline__ void load8(const __nv_bfloat16* p, int n, float (&v)[8]) {
  load8<kVec>(reinterpret_cast<const uint16_t*>(p), n, v);
}

template <bool kVec>
__device__ __forceinline__ void load8(const float* p, int n, float (&v)[8]) {
  if constexpr (kVec) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = j < n ? p[j] : 0.0f;
  }
}

// The first n (≤ 8) values rounded to BF16 at p; kVec: all 8, one 16-byte store.
template <bool kVec>
__device__ __forceinline__ void store8(uint16_t* p, int n, const float (&v)[8]) {
  if constexpr (kVec) {
    uint4 r;
    r.x = bf16_bits(v[0]) | (bf16_bits(v[1]) << 16);
    r.y = bf16_bits(v[2]) | (bf16_bits(v[3]) << 16);
    r.z = bf16_bits(v[4]) | (bf16_bits(v[5]) << 16);
    r.w = bf16_bits(v[6]) | (bf16_bits(v[7]) << 16);
    *reinterpret_cast<uint4*>(p) = r;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < n) p[j] = static_cast<uint16_t>(bf16_bits(v[j]));
  }
}

template <bool kVec>
__device__ __forceinline__ void store8(__nv_bfloat16* p, int n, const float (&v)[8]) {
  store8<kVec>(reinterpret_cast<uint16_t*>(p), n, v);
}

template <bool kVec>
__device__ __forceinline__ void store8(float* p, int n, const float (&v)[8]) {
  if constexpr (kVec) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (j < n) p[j] = v[j];
  }
}

// ---- cp.async ------------------------------------------------------------------------------

// The shared-state-space address of a pointer into shared memory (what cp.async,
// ldmatrix and friends take).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, bypassing L1; src_bytes = 0 writes zeros (nothing is read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16(smem_addr(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace fp8lm::cuda
