#include "backend/cuda/common/check.h"
#include "backend/cuda/quant/fp8_cast.h"
#include "backend/cuda/common/fp8_convert.cuh"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535u * 16u ? b : 65535u * 16u);
}

template <typename Load>
__global__ void cast_to_fp8_kernel(Load load, size_t n, uint8_t* out, Fp8Format format, Saturation sat) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = device_float_to_fp8(load(i), format, sat);
}

__global__ void fp8_to_f32_kernel(const uint8_t* in, size_t n, float* out, Fp8Format format) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = device_fp8_to_float(in[i], format);
}

struct LoadF32 {
  const float* p;
  __device__ float operator()(size_t i) const { return p[i]; }
};
struct LoadBF16 {
  const uint16_t* p;
  __device__ float operator()(size_t i) const { return bf16_bits_to_float(p[i]); }
};
struct LoadBitPattern {
  uint32_t first;
  __device__ float operator()(size_t i) const { return __uint_as_float(first + uint32_t(i)); }
};

template <typename Load>
void launch_to_fp8(Load load, size_t n, uint8_t* out, Fp8Format format, Saturation sat, cudaStream_t stream) {
  if (n == 0) return;
  cast_to_fp8_kernel<<<blocks_for(n), kThreads, 0, stream>>>(load, n, out, format, sat);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void cast_f32_to_fp8(const float* in, size_t n, uint8_t* out, Fp8Format format, Saturation sat,
                     cudaStream_t stream) {
  launch_to_fp8(LoadF32{in}, n, out, format, sat, stream);
}

void cast_bf16_to_fp8(const uint16_t* in, size_t n, uint8_t* out, Fp8Format format, Saturation sat,
                      cudaStream_t stream) {
  launch_to_fp8(LoadBF16{in}, n, out, format, sat, stream);
}

void cast_f32_bit_range_to_fp8(uint32_t first, size_t n, uint8_t* out, Fp8Format format,
                               Saturation sat, cudaStream_t stream) {
  launch_to_fp8(LoadBitPattern{first}, n, out, format, sat, stream);
}

void cast_fp8_to_f32(const uint8_t* in, size_t n, float* out, Fp8Format format, cudaStream_t stream) {
  if (n == 0) return;
  fp8_to_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, n, out, format);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8lm::cuda
