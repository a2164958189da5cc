// Writing new K/V into the paged cache, shared by store_kv (paged_attention.cu) and the fused
// split_norm_rope_qkv (qkv_rope_kernels.cu), so that both round exactly as the CPU cache does
// (paged_attention.h, "Storing"): BF16 as is, F32 widened, FP8 = code(float(x) / scale) with an
// IEEE division and finite saturation. One copy: the GPU tests compare the cache bit for bit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/paged_kv_types.h"

namespace fp8lm::cuda {

// The element index of (block, kv head h, position pos, element d) in one layer's K or V array
// ([num_blocks][num_kv_heads][block_size][head_dim]).
__device__ __forceinline__ int64_t kv_cache_index(int64_t block, int h, int num_kv_heads, int64_t pos, int block_size,
                                                  int head_dim, int d) {
  return ((block * num_kv_heads + h) * block_size + pos % block_size) * head_dim + d;
}

// 8 BF16 values (their bits, x) into the cache at element index `at` (a multiple of 8).
template <backend::KvElement E>
__device__ __forceinline__ void store_kv8(void* cache, int64_t at, uint4 x, float scale) {
  using backend::KvElement;
  if constexpr (E == KvElement::kBF16) {
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(cache) + at) = x;
  } else {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
    float f[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      f[2 * j] = __uint_as_float(w[j] << 16);
      f[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
    if constexpr (E == KvElement::kF32) {
      auto* dst = reinterpret_cast<float4*>(static_cast<float*>(cache) + at);
      dst[0] = make_float4(f[0], f[1], f[2], f[3]);
      dst[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
      constexpr Fp8Format fmt = E == KvElement::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
      uint32_t c[2] = {0, 0};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        // A true IEEE division, as the CPU cache (never a multiply by the reciprocal).
        const uint32_t code = device_float_to_fp8(__fdiv_rn(f[i], scale), fmt, Saturation::kSatFinite);
        c[i / 4] |= code << (8 * (i % 4));
      }
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(cache) + at) = make_uint2(c[0], c[1]);
    }
  }
}

// The same with the element type chosen at run time (uniform across a kernel: no divergence).
__device__ __forceinline__ void store_kv8(backend::KvElement e, void* cache, int64_t at, uint4 x, float scale) {
  using backend::KvElement;
  switch (e) {
    case KvElement::kF32: store_kv8<KvElement::kF32>(cache, at, x, scale); break;
    case KvElement::kBF16: store_kv8<KvElement::kBF16>(cache, at, x, scale); break;
    case KvElement::kE4M3: store_kv8<KvElement::kE4M3>(cache, at, x, scale); break;
    default: store_kv8<KvElement::kE5M2>(cache, at, x, scale); break;
  }
}

}  // namespace fp8lm::cuda
