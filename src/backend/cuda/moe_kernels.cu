#include "backend/cuda/moe_kernels.h"

#include <cmath>
#include <string>

#include "backend/cuda/check.h"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int kRouteWarps = 4;

// One warp per row: the probabilities in shared memory, then top_k rounds of a warp argmax.
__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize,
                     int32_t* ids, float* weights) {
  extern __shared__ float probs[];  // [kRouteWarps][experts]
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t row = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (row >= rows) return;
  float* p = probs + int64_t(warp) * experts;
  const __nv_bfloat16* l = logits + row * experts;
  float mx = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    p[e] = __bfloat162float(l[e]);
    mx = fmaxf(mx, p[e]);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  float sum = 0.0f;
  for (int e = lane; e < experts; e += 32) {
    p[e] = expf(p[e] - mx);
    sum += p[e];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  for (int e = lane; e < experts; e += 32) p[e] /= sum;
  __syncwarp();
  int32_t* row_ids = ids + row * top_k;
  float* row_w = weights + row * top_k;
  for (int k = 0; k < top_k; ++k) {
    // This lane's best among its experts not yet taken (taken ones are −1), the lower id on ties.
    float best = -2.0f;
    int best_e = experts;
    for (int e = lane; e < experts; e += 32)
      if (p[e] > best) best = p[e], best_e = e;
    for (int o = 16; o > 0; o >>= 1) {
      const float b = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      const int be = __shfl_xor_sync(0xFFFFFFFFu, best_e, o);
      if (b > best || (b == best && be < best_e)) best = b, best_e = be;
    }
    if (lane == 0) {
      // Only NaNs left (NaN logits): the lowest id not taken, as cpu::route_row's comparisons give.
      if (best_e == experts)
        for (int e = 0; e < experts && best_e == experts; ++e)
          if (!(p[e] == -1.0f)) best_e = e, best = p[e];
      row_ids[k] = best_e;
      row_w[k] = best;
      p[best_e] = -1.0f;
    }
    __syncwarp();
  }
  if (renormalize && lane == 0) {
    float t = 0.0f;
    for (int k = 0; k < top_k; ++k) t += row_w[k];  // in order, as cpu::route_row
    for (int k = 0; k < top_k; ++k) row_w[k] /= t;
  }
}

__global__ void moe_combine_kernel(const __nv_bfloat16* y, int64_t cols, const int32_t* pos, const float* weights,
                                   int top_k, __nv_bfloat16* out) {
  const int64_t row = blockIdx.x;
  const int32_t* rp = pos + row * top_k;
  const float* rw = weights + row * top_k;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const float term = __fmul_rn(__bfloat162float(y[int64_t(rp[j]) * cols + c]), rw[j]);
      acc = __fadd_rn(acc, term);
    }
    out[row * cols + c] = __float2bfloat16_rn(acc);
  }
}

[[noreturn]] void fail(const char* op, const std::string& what) { throw Error(std::string("cuda ") + op + ": " + what); }

}  // namespace

void moe_route(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize, int32_t* ids,
               float* weights, cudaStream_t stream) {
  if (experts < 1 || experts > kMoeMaxExperts)
    fail("moe_route", std::to_string(experts) + " experts, not in [1, " + std::to_string(kMoeMaxExperts) + "]");
  if (top_k < 1 || top_k > experts)
    fail("moe_route", "top_k " + std::to_string(top_k) + " is not in [1, " + std::to_string(experts) + "]");
  if (rows < 0) fail("moe_route", "negative row count");
  if (rows == 0) return;
  if (logits == nullptr || ids == nullptr || weights == nullptr) fail("moe_route", "null pointer");
  const int64_t blocks = (rows + kRouteWarps - 1) / kRouteWarps;
  const size_t smem = size_t(kRouteWarps) * size_t(experts) * sizeof(float);
  moe_route_kernel<<<unsigned(blocks), kRouteWarps * 32, smem, stream>>>(logits, rows, experts, top_k, renormalize,
                                                                          ids, weights);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

void moe_combine(const __nv_bfloat16* y, int64_t cols, const int32_t* pos, const float* weights, int64_t rows,
                 int top_k, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || top_k < 1) fail("moe_combine", "bad shape");
  if (rows == 0 || cols == 0) return;
  if (y == nullptr || pos == nullptr || weights == nullptr || out == nullptr) fail("moe_combine", "null pointer");
  if (rows > 0x7FFFFFFF) fail("moe_combine", "at most 2^31 - 1 rows");
  moe_combine_kernel<<<unsigned(rows), 256, 0, stream>>>(y, cols, pos, weights, top_k, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8lm::cuda
