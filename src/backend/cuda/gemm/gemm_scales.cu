// Scale-grid conversions from fp8lm's row-major grids to cuBLASLt's block-scaling
// layouts (cublaslt_gemm.h says which and why).
#include <cstdint>

#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"

namespace fp8lm::cuda {
namespace {

constexpr int64_t kGroup = 128;
constexpr int kTile = 32;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// out[c, r] = in[r, c] for in [rows, cols]: a 32×32 tile through shared memory,
// so that both the reads and the writes are coalesced.
__global__ void transpose_kernel(const float* __restrict__ in, int64_t rows, int64_t cols,
                                 float* __restrict__ out) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = int(threadIdx.y); i < kTile; i += int(blockDim.y)) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int i = int(threadIdx.y); i < kTile; i += int(blockDim.y)) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][i];
  }
}

// out[r, 0:padded] = in[r, 0:cols], zeros beyond.
__global__ void pad_rows_kernel(const float* __restrict__ in, int64_t rows, int64_t cols, int64_t padded,
                                float* __restrict__ out) {
  const int64_t total = rows * padded;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / padded, c = i % padded;
    out[i] = c < cols ? in[r * cols + c] : 0.0f;
  }
}

}  // namespace

int64_t cublas_block_scale_count(int64_t n, int64_t k) {
  return cdiv(n, kGroup) * (cdiv(cdiv(k, kGroup), 4) * 4);
}

void group_scales_to_cublas(const float* in, int64_t m, int64_t k, float* out, cudaStream_t stream) {
  const int64_t groups = cdiv(k, kGroup);
  if (m <= 0 || groups <= 0) return;
  const dim3 grid(unsigned(cdiv(groups, kTile)), unsigned(cdiv(m, kTile)));
  transpose_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(in, m, groups, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

void block_scales_to_cublas(const float* in, int64_t n, int64_t k, float* out, cudaStream_t stream) {
  const int64_t rows = cdiv(n, kGroup), cols = cdiv(k, kGroup), padded = cdiv(cols, 4) * 4;
  if (rows <= 0 || cols <= 0) return;
  const int64_t total = rows * padded;
  const int64_t blocks = cdiv(total, 256) < 4096 ? cdiv(total, 256) : 4096;
  pad_rows_kernel<<<unsigned(blocks), 256, 0, stream>>>(in, rows, cols, padded, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8lm::cuda
