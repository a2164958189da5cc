#include "backend/cuda/cuda_ops_kernels.h"

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/cuda/common/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

__global__ void dequantize_kernel(const uint8_t* codes, const float* scales, int layout, int64_t n, int64_t k,
                                  __nv_bfloat16* out) {
  const int64_t total = n * k;
  const int64_t blocks_k = (k + 127) / 128;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k;
    float s = scales[0];
    if (layout == int(WeightScaleLayout::kChannel)) s = scales[r];
    else if (layout == int(WeightScaleLayout::kBlock128)) s = scales[(r / 128) * blocks_k + c / 128];
    out[i] = __float2bfloat16_rn(__fmul_rn(device_fp8_to_float(codes[i], Fp8Format::kE4M3), s));
  }
}

__global__ void broadcast_kernel(const float* scale, int64_t m, float* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = *scale;
}

__global__ void split_kernel(const __nv_bfloat16* x, int64_t rows, int64_t cols, ColumnSplit split) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    int64_t c = i % cols;
    int part = 0;
    while (c >= split.width[part]) c -= split.width[part++];
    split.out[part][r * split.width[part] + c] = x[i];
  }
}

int grid_for(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 132 * 16)); }

}  // namespace

void dequantize_weight_bf16(const uint8_t* codes, const float* scales, WeightScaleLayout layout, int64_t n, int64_t k,
                            __nv_bfloat16* out, cudaStream_t stream) {
  if (n <= 0 || k <= 0) throw Error("dequantize_weight_bf16: the shape must be positive");
  dequantize_kernel<<<grid_for(n * k), 256, 0, stream>>>(codes, scales, int(layout), n, k, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

void broadcast_scale(const float* scale, int64_t m, float* out, cudaStream_t stream) {
  if (m <= 0) return;
  broadcast_kernel<<<grid_for(m), 256, 0, stream>>>(scale, m, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

void split_columns(const __nv_bfloat16* x, int64_t rows, const ColumnSplit& split, cudaStream_t stream) {
  if (split.count < 1 || split.count > 4) throw Error("split_columns: 1 to 4 parts");
  int64_t cols = 0;
  for (int i = 0; i < split.count; ++i) cols += split.width[i];
  if (rows <= 0 || cols <= 0) return;
  launch_dependent(split_kernel, grid_for(rows * cols), 256, 0, stream, x, rows, cols, split);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8lm::cuda
