// bf16_gemv_grouped: see bf16_gemv_grouped.h.
#include "backend/cuda/gemv/bf16_gemv_grouped.h"

#include <string>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/launch.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;

// Block: kBlockRows output rows of one slot (blockIdx.z); warp: kRowsPerWarp of them at once,
// lane: 8 consecutive K of each, every 256 K.
template <int kM>
__global__ void __launch_bounds__(kWarps * 32) bf16_gemv_grouped_kernel(Bf16GemvGroupedArgs a) {
  pdl_release();
  pdl_wait();  // the slot table and x come from the kernels before
  const int s = int(blockIdx.z);
  if (s >= a.slots[0]) return;
  const int e = a.slots[1 + s], first = a.slots[1 + a.max_slots + s], m = a.slots[1 + 2 * a.max_slots + s];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t n = a.n, k = a.k;
  const int64_t row0 = int64_t(blockIdx.x) * kBlockRows + warp * kRowsPerWarp;
  if (row0 >= n) return;
  const __nv_bfloat16* w = a.w[e];
  const __nv_bfloat16* xr[kM];
#pragma unroll
  for (int t = 0; t < kM; ++t) {
    const int tt = t < m ? t : 0;
    xr[t] = a.x + (a.x_rows != nullptr ? int64_t(a.x_rows[first + tt]) : int64_t(first + tt)) * k;
  }
  float acc[kRowsPerWarp][kM] = {};
  for (int64_t kk = int64_t(lane) * 8; kk < k; kk += 256) {
    float wf[kRowsPerWarp][8];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = row0 + r < n ? row0 + r : n - 1;
      bf16x8_to_float(ld_stream(w + row * k + kk), wf[r]);
    }
#pragma unroll
    for (int t = 0; t < kM; ++t) {
      if (t >= m) break;
      float xf[8];
      load8<true>(xr[t] + kk, 8, xf);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][t] = __fmaf_rn(wf[r][i], xf[i], acc[r][t]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int t = 0; t < kM; ++t) {
      if (t >= m) break;
      float v = acc[r][t];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
      const int64_t row = row0 + r;
      if (lane == t % 32 && row < n) {
        if (a.bias != nullptr) v = __fadd_rn(v, __bfloat162float(a.bias[e][row]));
        a.y[int64_t(first + t) * n + row] = __float2bfloat16_rn(v);
      }
    }
}

template <int kM>
void launch(const Bf16GemvGroupedArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned((a.n + kBlockRows - 1) / kBlockRows), 1, unsigned(a.max_slots));
  launch_maybe_dependent(a.programmatic_launch, bf16_gemv_grouped_kernel<kM>, grid, dim3(kWarps * 32), 0, stream, a);
}

}  // namespace

void bf16_gemv_grouped(const Bf16GemvGroupedArgs& a, cudaStream_t stream) {
  auto fail = [](const std::string& what) { throw Error("bf16_gemv_grouped: " + what); };
  if (a.m < 1 || a.m > 16) fail("m = " + std::to_string(a.m) + " is outside 1..16");
  if (a.n < 1 || a.k < 1 || a.k % 8 != 0)
    fail("weight shape [" + std::to_string(a.n) + ", " + std::to_string(a.k) + "]: positive, k a multiple of 8");
  if (a.slots == nullptr || a.w == nullptr || a.x == nullptr || a.y == nullptr) fail("null pointer");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) fail("x is not 16-byte aligned");
  if (a.max_slots < 1 || a.max_slots > 65535) fail("max_slots = " + std::to_string(a.max_slots) + " is outside 1..65535");
  if (a.m == 1) launch<1>(a, stream);
  else if (a.m <= 2) launch<2>(a, stream);
  else if (a.m <= 4) launch<4>(a, stream);
  else if (a.m <= 8) launch<8>(a, stream);
  else launch<16>(a, stream);
}

}  // namespace fp8lm::cuda
