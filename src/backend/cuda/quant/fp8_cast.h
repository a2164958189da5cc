// Element-wise FP8 casts of device arrays (the GPU twin of numerics/cast.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "numerics/fp8_format.h"

namespace fp8lm::cuda {

void cast_f32_to_fp8(const float* in, size_t n, uint8_t* out, Fp8Format format, Saturation sat,
                     cudaStream_t stream = nullptr);
void cast_bf16_to_fp8(const uint16_t* in, size_t n, uint8_t* out, Fp8Format format,
                      Saturation sat, cudaStream_t stream = nullptr);
void cast_fp8_to_f32(const uint8_t* in, size_t n, float* out, Fp8Format format,
                     cudaStream_t stream = nullptr);
// Writes fp8(bit_cast<float>(first + i)) for i in [0, n): sweeps of the float32
// bit patterns without materialising the inputs.
void cast_f32_bit_range_to_fp8(uint32_t first, size_t n, uint8_t* out, Fp8Format format,
                               Saturation sat, cudaStream_t stream = nullptr);

}  // namespace fp8lm::cuda
