// FP8 activation quantization (quant_kernels.h). Bit-exactness with the CPU
// reference rests on:
//   * every float operation an explicit _rn intrinsic (nvcc contracts a·b + c
//     into an FMA by default, and a plain `/` may be built approximate);
//   * amax over |x| ignoring NaN (fmaxf), combined by max, which is exact and
//     order-free, so any reduction tree gives the CPU's value;
//   * the scale rule of numerics/quantize.cpp, its floors taken from ScaleRule;
//   * device_float_to_fp8 (saturating RNE with the NaN's sign, fp8_convert.cuh).
//
// One block per row ("row kernels"): the block loads the row (8 elements per
// thread and vector: one 16-byte load for BF16), reduces amax per scale cell in
// shared memory, turns the amaxes into scales, then divides and stores the
// codes. Rows of up to max_threads × 64 elements stay in registers between the
// passes; longer rows are re-read from memory in each pass (the "streaming"
// kernel). Per-tensor scales take two launches over the data: amax (atomicMax
// on the float bits, exact since |x| ≥ 0) and, after a one-thread kernel has
// made the scale, the static-scale pass.
#include "backend/cuda/quant/quant_kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/cuda/quant/quantize_device.cuh"
#include "backend/cuda/quant/row_quant_device.cuh"
#include "backend/cuda/common/launch.cuh"
#include "numerics/silu.h"
#include "common/error.h"

namespace fp8lm::cuda {

int64_t Fp8ActQuant::scale_count(int64_t m, int64_t k) const {
  if (static_scale != nullptr) return 0;
  switch (granularity) {
    case Granularity::kTensor: return 1;
    case Granularity::kToken:
    case Granularity::kChannel: return m;
    case Granularity::kGroup: return group_size > 0 ? m * ((k + group_size - 1) / group_size) : 0;
    case Granularity::kBlock: break;
  }
  return 0;
}

namespace detail {
RowKernelTuning& row_kernel_tuning() {
  static RowKernelTuning tuning;
  return tuning;
}
}  // namespace detail

namespace {

constexpr int kRegisterMaxThreads = 512;   // launch bound of the register kernels
constexpr int kStreamingThreads = 1024;    // and of the streaming kernel
constexpr int kMaxCells = 12000;           // scale cells per row in shared memory (< 48 KB with the rest)

// ---- the value producer ------------------------------------------------------------

// The kernels read a row's values through an Op (load): PlainOp, the values in memory.
template <typename T>
struct PlainOp {
  const T* x;
  template <bool kVec>
  __device__ __forceinline__ void load(int64_t row, int k, int e0, float (&v)[8]) const {
    load8<kVec>(x + row * k + e0, k - e0, v);
  }
};

// The row held in registers: VPT vectors of 8 per thread.
template <int VPT, bool kVec, class Op>
__global__ void __launch_bounds__(kRegisterMaxThreads) row_kernel(Op op, RowParams p) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  extern __shared__ unsigned cells[];
  const int64_t row = blockIdx.x;
  for (int c = threadIdx.x; c < p.ngroups; c += blockDim.x) cells[c] = 0u;

  float v[VPT][8];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int e0 = (i * int(blockDim.x) + int(threadIdx.x)) * 8;
    if (e0 < p.k) {
      op.template load<kVec>(row, p.k, e0, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[i][j] = 0.0f;
    }
  }
  __syncthreads();
  if (p.mode != RowQuantMode::kStatic) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) amax_vector<kVec>(v[i], (i * int(blockDim.x) + int(threadIdx.x)) * 8, p, cells);
  }
  __syncthreads();
  float s0 = 0.0f;
  if (!make_scales(row, p, cells, s0)) return;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int e0 = (i * int(blockDim.x) + int(threadIdx.x)) * 8;
    if (e0 < p.k) store_codes<kVec>(v[i], row, e0, p, cells, s0);
  }
}

// Long rows: each pass re-reads (and recomputes) the row's values.
template <bool kVec, class Op>
__device__ __forceinline__ void compute_vector(const Op& op, int64_t row, int k, int e0, float (&v)[8]) {
  if (e0 < k) {
    op.template load<kVec>(row, k, e0, v);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  }
}

template <bool kVec, class Op>
__global__ void __launch_bounds__(kStreamingThreads) row_kernel_streaming(Op op, RowParams p) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  extern __shared__ unsigned cells[];
  const int64_t row = blockIdx.x;
  for (int c = threadIdx.x; c < p.ngroups; c += blockDim.x) cells[c] = 0u;
  __syncthreads();
  if (p.mode != RowQuantMode::kStatic) {
    for (int base = 0; base < p.nv; base += blockDim.x) {  // all lanes iterate: amax_vector shuffles
      const int e0 = (base + int(threadIdx.x)) * 8;
      float v[8];
      compute_vector<kVec>(op, row, p.k, e0, v);
      amax_vector<kVec>(v, e0, p, cells);
    }
  }
  __syncthreads();
  float s0 = 0.0f;
  if (!make_scales(row, p, cells, s0)) return;
  for (int vi = threadIdx.x; vi < p.nv; vi += blockDim.x) {
    float v[8];
    compute_vector<kVec>(op, row, p.k, vi * 8, v);
    store_codes<kVec>(v, row, vi * 8, p, cells, s0);
  }
}

__global__ void finalize_tensor_scale(float* scale, RowParams p) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  *scale = scale_from_amax(__uint_as_float(*reinterpret_cast<const unsigned*>(scale)), p);
}

// ---- host side -----------------------------------------------------------------------

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool aligned(const void* p, uintptr_t bytes) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <class Kernel>
void launch(Kernel kernel, int64_t m, int threads, size_t smem, cudaStream_t stream, const auto& op,
            const RowParams& p) {
  launch_dependent(kernel, static_cast<unsigned>(m), static_cast<unsigned>(threads), smem, stream, op, p);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

template <bool kVec, class Op>
void launch_rows_vec(const Op& op, int64_t m, const RowParams& p, cudaStream_t stream) {
  const detail::RowKernelTuning& tuning = detail::row_kernel_tuning();
  const int max_threads = std::clamp((tuning.max_threads + 31) / 32 * 32, 32, kRegisterMaxThreads);
  const size_t smem = size_t(p.ngroups) * sizeof(unsigned);
  // Up to 4 vectors per thread in blocks of up to 256 threads; then blocks of
  // up to max_threads with 4, then 8 (measured on the H200 at k = 4096 and
  // 14336: 2 × 256 beats 1 × 512, 4 × 448 beats 8 × 224 by a third).
  const int small_cap = std::min(256, max_threads);
  int vpt = 1;
  while (vpt < 4 && cdiv(p.nv, vpt) > small_cap) vpt *= 2;
  if (cdiv(p.nv, vpt) > small_cap)
    while (vpt < 8 && cdiv(p.nv, vpt) > max_threads) vpt *= 2;
  const int64_t threads = std::max<int64_t>(32, cdiv(cdiv(p.nv, vpt), 32) * 32);
  if (tuning.force_streaming || threads > max_threads) {
    const int st = int(std::min<int64_t>(kStreamingThreads, std::max<int64_t>(32, cdiv(p.nv, 32) * 32)));
    launch(row_kernel_streaming<kVec, Op>, m, st, smem, stream, op, p);
    return;
  }
  switch (vpt) {
    case 1: launch(row_kernel<1, kVec, Op>, m, int(threads), smem, stream, op, p); break;
    case 2: launch(row_kernel<2, kVec, Op>, m, int(threads), smem, stream, op, p); break;
    case 4: launch(row_kernel<4, kVec, Op>, m, int(threads), smem, stream, op, p); break;
    default: launch(row_kernel<8, kVec, Op>, m, int(threads), smem, stream, op, p); break;
  }
}

template <class Op>
void launch_rows(const Op& op, int64_t m, const RowParams& p, bool vec, cudaStream_t stream) {
  if (m == 0) return;
  if (vec) launch_rows_vec<true>(op, m, p, stream);
  else launch_rows_vec<false>(op, m, p, stream);
}

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw Error(std::string("cuda ") + op + ": " + what);
}

}  // namespace

Fp8ScaleRule dynamic_scale_rule(const Fp8ActQuant& q) {
  Fp8ScaleRule r;
  r.fmax = traits(q.format).max_finite;
  const ScaleRule rule = q.granularity == Granularity::kGroup ? ScaleRule::vllm_group() : ScaleRule::runtime(q.format);
  r.amax_floor = rule.amax_floor;
  r.scale_floor = rule.scale_floor;
  if (q.granularity != Granularity::kTensor && q.granularity != Granularity::kGroup && q.token_scale_upper_bound > 0.0f)
    r.scale_cap = q.token_scale_upper_bound / r.fmax;  // as cpu::quantize_activations
  return r;
}

namespace {

// Checks the shape and the granularity and fills the launch parameters.
RowParams make_params(const char* op, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes,
                      float* scales) {
  if (m < 0 || k < 0)
    fail(op, "shape [" + std::to_string(m) + ", " + std::to_string(k) + "] has a negative dimension");
  if (m > 0x7FFFFFFF) fail(op, "at most 2^31 - 1 rows, got " + std::to_string(m));
  if (k > (int64_t(1) << 30)) fail(op, "rows of at most 2^30 elements, got " + std::to_string(k));
  if (m * k > 0 && codes == nullptr) fail(op, "codes is null");
  RowParams p;
  p.k = int(k);
  p.nv = int(cdiv(k, 8));
  p.codes = codes;
  p.scales = scales;
  p.format = q.format;
  p.fmax = traits(q.format).max_finite;
  if (q.static_scale != nullptr) {
    p.mode = RowQuantMode::kStatic;
    p.static_scale = q.static_scale;
    return p;
  }
  if (scales == nullptr) fail(op, "scales is null");
  p.mode = RowQuantMode::kDynamic;
  switch (q.granularity) {
    case Granularity::kTensor:
    case Granularity::kToken:
    case Granularity::kChannel: {
      if (!(q.token_scale_upper_bound >= 0.0f && q.token_scale_upper_bound < 3.4e38f))
        fail(op, "token scale upper bound must be finite and >= 0, got " + std::to_string(q.token_scale_upper_bound));
      const Fp8ScaleRule rule = dynamic_scale_rule(q);
      p.amax_floor = rule.amax_floor;
      p.scale_floor = rule.scale_floor;
      p.scale_cap = rule.scale_cap;
      p.group = std::max(p.k, 1);
      break;
    }
    case Granularity::kGroup: {
      if (q.group_size <= 0 || q.group_size > (int64_t(1) << 30))
        fail(op, "group size must be in [1, 2^30], got " + std::to_string(q.group_size));
      const Fp8ScaleRule rule = dynamic_scale_rule(q);
      p.amax_floor = rule.amax_floor;
      p.scale_floor = rule.scale_floor;
      p.group = int(q.group_size);
      p.ngroups = int(cdiv(k, q.group_size));
      if (p.ngroups > kMaxCells)
        fail(op, "at most " + std::to_string(kMaxCells) + " groups per row, got " + std::to_string(p.ngroups) +
                     " (k " + std::to_string(k) + ", group " + std::to_string(q.group_size) + ")");
      if (p.group % 8 != 0) {
        p.seg_lanes = 0;
      } else {
        const int q8 = p.group / 8;
        p.seg_lanes = std::min(32, q8 & -q8);  // largest power of two dividing g / 8
      }
      break;
    }
    case Granularity::kBlock:
      fail(op, "block (2-D) scales are for weights, not activations");
  }
  return p;
}

// Runs the row kernels as q says; per-tensor dynamic takes the amax pass first.
template <class Op>
void run(const char* op_name, const Op& op, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes,
         float* scales, bool vec, cudaStream_t stream) {
  RowParams p = make_params(op_name, m, k, q, codes, scales);
  if (p.mode == RowQuantMode::kDynamic && q.granularity == Granularity::kTensor) {
    FP8LM_CUDA_CHECK(cudaMemsetAsync(scales, 0, sizeof(float), stream));
    RowParams a = p;
    a.mode = RowQuantMode::kAmax;
    a.amax_out = reinterpret_cast<unsigned*>(scales);
    if (k > 0) launch_rows(op, m, a, vec, stream);
    launch_dependent(finalize_tensor_scale, 1, 1, 0, stream, scales, p);
    FP8LM_CUDA_CHECK(cudaGetLastError());
    p.mode = RowQuantMode::kStatic;
    p.static_scale = scales;
  }
  launch_rows(op, m, p, vec, stream);
}

bool vec_ok(int64_t k, const void* x, const uint8_t* codes) {
  return k % 8 == 0 && aligned(x, 16) && aligned(codes, 8);
}

template <typename T>
void quantize_impl(const T* x, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes, float* scales,
                   cudaStream_t stream, const char* name) {
  if (m * k > 0 && x == nullptr) fail(name, "x is null");
  const PlainOp<T> op{x};
  run(name, op, m, k, q, codes, scales, vec_ok(k, x, codes), stream);
}

// silu.h's device side on its own, for test_cuda_quant only (detail::exp_f32_bit_range,
// detail::silu_mul_f32_array): the model's SiLU·mul is model_kernels' silu_mul.
__global__ void exp_bit_range_kernel(uint32_t first, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(first + uint32_t(i));
    out[i] = isnan(x) ? __uint_as_float(0x7FC00000u) : exp_f32(x);
  }
}

__global__ void silu_mul_array_kernel(const float* g, const float* u, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = silu_mul_f32(g[i], u[i]);
}

unsigned elementwise_blocks(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, size_t(132) * 64)); }

}  // namespace

namespace detail {

void exp_f32_bit_range(uint32_t first, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  exp_bit_range_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(first, n, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

void silu_mul_f32_array(const float* gate, const float* up, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  silu_mul_array_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(gate, up, n, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail

RowParams row_quant_params(const char* op, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes,
                           float* scales) {
  if (q.static_scale == nullptr && q.granularity == Granularity::kTensor)
    fail(op, "a dynamic per-tensor scale needs every row's amax first: it is not quantized by the producer");
  return make_params(op, m, k, q, codes, scales);
}

void quantize_fp8_dynamic(const __nv_bfloat16* x, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes,
                          float* scales, cudaStream_t stream) {
  if (q.static_scale != nullptr) fail("quantize_fp8_dynamic", "given a static scale; use quantize_fp8_static");
  quantize_impl(x, m, k, q, codes, scales, stream, "quantize_fp8_dynamic");
}

void quantize_fp8_dynamic(const float* x, int64_t m, int64_t k, const Fp8ActQuant& q, uint8_t* codes,
                          float* scales, cudaStream_t stream) {
  if (q.static_scale != nullptr) fail("quantize_fp8_dynamic", "given a static scale; use quantize_fp8_static");
  quantize_impl(x, m, k, q, codes, scales, stream, "quantize_fp8_dynamic");
}

void quantize_fp8_static(const __nv_bfloat16* x, int64_t m, int64_t k, const float* scale, uint8_t* codes,
                         cudaStream_t stream, Fp8Format format) {
  if (scale == nullptr) fail("quantize_fp8_static", "scale is null");
  Fp8ActQuant q = Fp8ActQuant::static_tensor(scale);
  q.format = format;
  quantize_impl(x, m, k, q, codes, nullptr, stream, "quantize_fp8_static");
}

void quantize_fp8_static(const float* x, int64_t m, int64_t k, const float* scale, uint8_t* codes,
                         cudaStream_t stream, Fp8Format format) {
  if (scale == nullptr) fail("quantize_fp8_static", "scale is null");
  Fp8ActQuant q = Fp8ActQuant::static_tensor(scale);
  q.format = format;
  quantize_impl(x, m, k, q, codes, nullptr, stream, "quantize_fp8_static");
}

}  // namespace fp8lm::cuda
