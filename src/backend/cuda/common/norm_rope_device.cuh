// The per-head RMSNorm and RoPE arithmetic (.cu only), shared by the separate
// kernels (model_kernels.cu: head_rms_norm, rope) and the fused q/k/v one
// (qkv_rope_kernels.cu). The fused kernel promises the separate kernels' bits,
// so both must run these very operations in this very order: one copy of each.
// Every float operation is an explicit _rn intrinsic in cpu_ops' order (nvcc
// would otherwise contract a·b + c into an FMA).
#pragma once

#include <cstdint>

#include "backend/cuda/common/device_helpers.cuh"

namespace fp8lm::cuda {

// ---- per-head RMSNorm ------------------------------------------------------------------

// The largest head_dim the per-head kernels take: 32 lanes × 4 vectors × 8.
inline constexpr int kMaxHeadDim = 1024;

// How a head is spread over lanes: a group of `group` lanes (a power of two ≤
// 32, so a group never crosses a warp), lane l holding the 8-element vectors
// starting at (l + i · group) · 8 for i < vpl. The sum of squares depends on
// this layout (each lane sums its vectors in order, then the group's
// butterfly), so every kernel that norms heads takes it from here.
struct HeadLanes {
  int group = 1;
  int vpl = 1;  // vectors per lane: 1, 2 or 4
};
__host__ __device__ constexpr HeadLanes head_lanes(int head_dim) {
  const int vectors = (head_dim + 7) / 8;
  HeadLanes l;
  while (l.group < 32 && l.group < vectors) l.group *= 2;
  const int per_lane = (vectors + l.group - 1) / l.group;
  l.vpl = per_lane <= 1 ? 1 : per_lane <= 2 ? 2 : 4;
  return l;
}

__device__ __forceinline__ double sum_squares(const float (&v)[8], double acc) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const double d = static_cast<double>(v[j]);
    acc = __fma_rn(d, d, acc);  // d² is exact in double: the same as acc + d·d
  }
  return acc;
}

// The sum over a group of g lanes (xor butterfly). Every lane of the warp must
// call it; xor offsets < g stay inside the group.
__device__ __forceinline__ double group_sum(double v, int g) {
  for (int o = g >> 1; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// 1 / sqrt(float(sum / n) + eps), as cpu_ops' rms_row.
__device__ __forceinline__ float rms_inv(double sum, int n, float eps) {
  const float mean = __double2float_rn(__ddiv_rn(sum, static_cast<double>(n)));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// v = w · (v · inv), as cpu_ops' rms_row.
__device__ __forceinline__ void scale8(float (&v)[8], const float (&w)[8], float inv) {
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(w[j], __fmul_rn(v[j], inv));
}

// ---- RoPE -----------------------------------------------------------------------------------

// RopeTable::cos_sin for one frequency: angle = float(position) · inv_freq in
// float32, then cos(angle) · attention_factor and sin(angle) · attention_factor
// (the precise sincosf, not the SFU approximation).
__device__ __forceinline__ void rope_cos_sin(int32_t position, float inv_freq, float attention_factor, float& c,
                                             float& s) {
  const float angle = __fmul_rn(__int2float_rn(position), inv_freq);
  float sv, cv;
  sincosf(angle, &sv, &cv);
  c = __fmul_rn(cv, attention_factor);
  s = __fmul_rn(sv, attention_factor);
}

// The rotate-half pair (a, b) = (x[i], x[i + half]) → (a·cos − b·sin, b·cos + a·sin),
// as cpu_ops' rope: the new a (rope_first) and the new b (rope_second).
__device__ __forceinline__ float rope_first(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float rope_second(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}
__device__ __forceinline__ void rotate(float& a, float& b, float c, float s) {
  const float x1 = a, x2 = b;
  a = rope_first(x1, x2, c, s);
  b = rope_second(x1, x2, c, s);
}

}  // namespace fp8lm::cuda
