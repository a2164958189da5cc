// The per-row model kernels (model_kernels.h). Agreement with the CPU backend
// rests on:
//   * every float operation an explicit _rn intrinsic, in cpu_ops' order (nvcc
//     contracts a·b + c into an FMA by default; the CPU build has
//     -ffp-contract=off), and IEEE division / square root for the norm;
//   * the norm's Σx² in double (exact for BF16 inputs in practice, so any
//     reduction order gives the CPU's sum);
//   * BF16 rounding as fp8lm::float_to_bf16 (RNE, every NaN 0x7FC0);
//   * SiLU from numerics/silu.h, FP8 decoding from fp8_convert.cuh.
//
// Shapes of the kernels:
//   row norms      one CTA per row, 8 elements per thread and vector (one 16-byte
//                  BF16 load), up to 8 vectors per thread held in registers
//                  (rows ≤ 32,768); longer rows re-read the row (L2) per pass.
//   head norms     a group of G ≤ 32 lanes per head (G · vectors ≥ head_dim / 8),
//                  reduced with shuffles inside the group; q and k in one grid.
//   rope           one CTA per row: cos/sin of the row's position into shared
//                  memory once, then every (head, 8 pairs) of q and k.
//   element-wise   grid-stride over 16-byte vectors, a scalar tail.
//   embedding      one CTA per output row, a 16-byte copy (BF16) or 8 FP8 codes
//                  decoded per thread and step.
//   argmax         a cluster of 1…8 CTAs per row, each scanning a slice of the
//                  row's 16-byte-aligned body (4 loads in flight per thread);
//                  the CTAs' results meet in rank 0 through distributed shared
//                  memory, so one launch needs no scratch.
// Rows whose start (base pointer or row stride) is not 16-byte aligned, or whose
// width is not a multiple of 8, take the scalar variant of the same kernel.
#include "backend/cuda/elementwise/model_kernels.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "backend/cuda/common/fp8_convert.cuh"
#include "backend/cuda/common/norm_rope_device.cuh"
#include "backend/cuda/common/launch.cuh"
#include "backend/cuda/quant/row_quant_device.cuh"
#include "common/error.h"
#include "numerics/silu.h"

namespace cg = cooperative_groups;

namespace fp8lm::cuda {

namespace detail {
ModelKernelTuning& model_kernel_tuning() {
  static ModelKernelTuning tuning;
  return tuning;
}
}  // namespace detail

namespace {

constexpr int kNormMaxThreads = 512;       // launch bound of the register row-norm kernel
constexpr int kNormStreamThreads = 1024;   // and of the streaming one
constexpr int kHeadNormThreads = 128;
constexpr int kRopeMaxThreads = 256;
constexpr int kCopyMaxThreads = 256;
constexpr int kElementwiseThreads = 128;  // small CTAs: a decode-sized array spreads over more SMs
constexpr int kArgmaxMaxThreads = 512;
constexpr int kArgmaxMaxCluster = 8;       // the portable cluster size

// ---- RMSNorm arithmetic (sum_squares, rms_inv, scale8: norm_rope_device.cuh) ----------

// Sum over the block (blockDim a multiple of 32) in a fixed order; every thread gets it.
__device__ double block_sum(double v, double* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double t = lane < int(blockDim.x >> 5) ? red[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t = __dadd_rn(t, __shfl_xor_sync(0xFFFFFFFFu, t, o));
    if (lane == 0) red[32] = t;
  }
  __syncthreads();
  return red[32];
}

// ---- row norms (rms_norm, add_rms_norm) ----------------------------------------------

struct NormArgs {
  const uint16_t* x = nullptr;      // rms_norm: the input; add_rms_norm: h (read back after the add)
  const uint16_t* delta = nullptr;  // add_rms_norm
  uint16_t* h = nullptr;            // add_rms_norm: where bf16(h + delta) goes (= x)
  const float* w = nullptr;
  uint16_t* out = nullptr;
  float eps = 0.0f;
  int cols = 0;
  int nv = 0;  // cdiv(cols, 8)
  bool quant = false;  // the normed rows also quantized (RowQuantOutput; register kernel only)
  RowParams q;
};

// The row's values at e0..e0+7; kAdd: bf16(h + delta), also written back to h.
template <bool kVec, bool kAdd>
__device__ __forceinline__ void norm_input(const NormArgs& a, int64_t row, int e0, float (&v)[8]) {
  const int64_t off = row * a.cols + e0;
  const int n = a.cols - e0;
  load8<kVec>(a.x + off, n, v);
  if constexpr (kAdd) {
    float d[8];
    load8<kVec>(a.delta + off, n, d);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = round_bf16(__fadd_rn(v[j], d[j]));
    store8<kVec>(a.h + off, n, v);
  }
}

template <bool kVec>
__device__ __forceinline__ void norm_output(const NormArgs& a, int64_t row, int e0, float inv, float (&v)[8]) {
  float w[8];
  load8<kVec>(a.w + e0, a.cols - e0, w);
  scale8(v, w, inv);
  store8<kVec>(a.out + row * a.cols + e0, a.cols - e0, v);
}

// The row in registers: VPT vectors of 8 per thread.
template <int VPT, bool kVec, bool kAdd>
__global__ void __launch_bounds__(kNormMaxThreads) rms_norm_kernel(NormArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  __shared__ double red[33];
  const int64_t row = blockIdx.x;
  float v[VPT][8];
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int e0 = (i * int(blockDim.x) + int(threadIdx.x)) * 8;
    if (e0 < a.cols) {
      norm_input<kVec, kAdd>(a, row, e0, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[i][j] = 0.0f;
    }
    ss = sum_squares(v[i], ss);
  }
  const float inv = rms_inv(block_sum(ss, red), a.cols, a.eps);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int e0 = (i * int(blockDim.x) + int(threadIdx.x)) * 8;
    if (e0 < a.cols) norm_output<kVec>(a, row, e0, inv, v[i]);
  }
  if (!a.quant) return;
  // The row's quantization (row_quant_device.cuh), of the BF16 values just stored: the steps
  // and the vector layout of quant_kernels' row kernel, so the same codes and scales.
  extern __shared__ unsigned cells[];
  for (int c = int(threadIdx.x); c < a.q.ngroups; c += int(blockDim.x)) cells[c] = 0u;
#pragma unroll
  for (int i = 0; i < VPT; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) v[i][j] = round_bf16(v[i][j]);
  __syncthreads();
  if (a.q.mode != RowQuantMode::kStatic) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) amax_vector<kVec>(v[i], (i * int(blockDim.x) + int(threadIdx.x)) * 8, a.q, cells);
  }
  __syncthreads();
  float s0 = 0.0f;
  if (!make_scales(row, a.q, cells, s0)) return;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const int e0 = (i * int(blockDim.x) + int(threadIdx.x)) * 8;
    if (e0 < a.cols) store_codes<kVec>(v[i], row, e0, a.q, cells, s0);
  }
}

// Long rows: the second pass re-reads the row (add_rms_norm: the h this thread wrote).
template <bool kVec, bool kAdd>
__global__ void __launch_bounds__(kNormStreamThreads) rms_norm_streaming_kernel(NormArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  __shared__ double red[33];
  const int64_t row = blockIdx.x;
  double ss = 0.0;
  for (int vi = int(threadIdx.x); vi < a.nv; vi += int(blockDim.x)) {
    float v[8];
    norm_input<kVec, kAdd>(a, row, vi * 8, v);
    ss = sum_squares(v, ss);
  }
  const float inv = rms_inv(block_sum(ss, red), a.cols, a.eps);
  for (int vi = int(threadIdx.x); vi < a.nv; vi += int(blockDim.x)) {
    float v[8];
    load8<kVec>(a.x + row * a.cols + vi * 8, a.cols - vi * 8, v);
    norm_output<kVec>(a, row, vi * 8, inv, v);
  }
}

// ---- per-head norms ----------------------------------------------------------------------

struct HeadNormArgs {
  uint16_t* x0 = nullptr;  // q (or the only tensor)
  uint16_t* x1 = nullptr;  // k (heads1 = 0: none)
  const float* w0 = nullptr;
  const float* w1 = nullptr;
  int64_t ld0 = 0, ld1 = 0;
  int heads0 = 0, heads1 = 0;
  int64_t total = 0;  // rows · (heads0 + heads1)
  int head_dim = 0;
  int group = 32;     // lanes per head: a power of two ≤ 32
  float eps = 0.0f;
};

template <int VPL, bool kVec>
__global__ void __launch_bounds__(kHeadNormThreads) head_rms_norm_kernel(HeadNormArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int g = a.group;
  const int lane = int(threadIdx.x) & (g - 1);
  const int64_t head = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / g;
  const bool valid = head < a.total;
  uint16_t* p = nullptr;
  const float* w = nullptr;
  if (valid) {
    const int per_row = a.heads0 + a.heads1;
    const int64_t row = head / per_row;
    const int j = int(head - row * per_row);
    if (j < a.heads0) {
      p = a.x0 + row * a.ld0 + int64_t(j) * a.head_dim;
      w = a.w0;
    } else {
      p = a.x1 + row * a.ld1 + int64_t(j - a.heads0) * a.head_dim;
      w = a.w1;
    }
  }
  float v[VPL][8];
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < VPL; ++i) {
    const int e0 = (lane + i * g) * 8;
    if (valid && e0 < a.head_dim) {
      load8<kVec>(p + e0, a.head_dim - e0, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[i][j] = 0.0f;
    }
    ss = sum_squares(v[i], ss);
  }
  ss = group_sum(ss, g);  // every lane of the warp takes part
  if (!valid) return;
  const float inv = rms_inv(ss, a.head_dim, a.eps);
#pragma unroll
  for (int i = 0; i < VPL; ++i) {
    const int e0 = (lane + i * g) * 8;
    if (e0 < a.head_dim) {
      float wv[8];
      load8<kVec>(w + e0, a.head_dim - e0, wv);
      scale8(v[i], wv, inv);
      store8<kVec>(p + e0, a.head_dim - e0, v[i]);
    }
  }
}

// ---- RoPE -------------------------------------------------------------------------------

struct RopeArgs {
  uint16_t* x0 = nullptr;
  uint16_t* x1 = nullptr;
  int64_t ld0 = 0, ld1 = 0;
  int heads0 = 0, heads1 = 0;
  int head_dim = 0;
  int half = 0;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  float attention_factor = 1.0f;
};

template <bool kVec>
__global__ void __launch_bounds__(kRopeMaxThreads) rope_kernel(RopeArgs a) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  extern __shared__ float cs[];  // cos [half], then sin [half]
  const int64_t row = blockIdx.x;
  const int half = a.half;
  // RopeTable::cos_sin (rope_cos_sin, norm_rope_device.cuh: the rotation as well).
  const int32_t pos = a.positions[row];
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x))
    rope_cos_sin(pos, a.inv_freq[i], a.attention_factor, cs[i], cs[half + i]);
  __syncthreads();
  const int heads = a.heads0 + a.heads1;
  const int per_head = kVec ? half / 8 : half;
  const int tasks = heads * per_head;
  for (int t = int(threadIdx.x); t < tasks; t += int(blockDim.x)) {
    const int h = t / per_head;
    const int i0 = (t - h * per_head) * (kVec ? 8 : 1);
    uint16_t* p = h < a.heads0 ? a.x0 + row * a.ld0 + int64_t(h) * a.head_dim
                               : a.x1 + row * a.ld1 + int64_t(h - a.heads0) * a.head_dim;
    if constexpr (kVec) {
      float x1[8], x2[8];
      load8<true>(p + i0, 8, x1);
      load8<true>(p + half + i0, 8, x2);
#pragma unroll
      for (int j = 0; j < 8; ++j) rotate(x1[j], x2[j], cs[i0 + j], cs[half + i0 + j]);
      store8<true>(p + i0, 8, x1);
      store8<true>(p + half + i0, 8, x2);
    } else {
      float x1 = bf16_bits_to_float(p[i0]), x2 = bf16_bits_to_float(p[half + i0]);
      rotate(x1, x2, cs[i0], cs[half + i0]);
      p[i0] = static_cast<uint16_t>(bf16_bits(x1));
      p[half + i0] = static_cast<uint16_t>(bf16_bits(x2));
    }
  }
}

// ---- element-wise ---------------------------------------------------------------------------
// Each op processes n ≤ 8 elements from flat index e0 (kVec: exactly 8, 16-byte aligned).

struct AddOp {
  uint16_t* acc;
  const uint16_t* x;
  template <bool kVec>
  __device__ __forceinline__ void run(int64_t e0, int n) const {
    float a[8], b[8];
    load8<kVec>(acc + e0, n, a);
    load8<kVec>(x + e0, n, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = __fadd_rn(a[j], b[j]);
    store8<kVec>(acc + e0, n, a);
  }
};

__device__ __forceinline__ void silu8(const uint16_t* g, const uint16_t* u, uint16_t* o, int n, bool vec) {
  float gv[8], uv[8];
  if (vec) {
    load8<true>(g, 8, gv);
    load8<true>(u, 8, uv);
  } else {
    load8<false>(g, n, gv);
    load8<false>(u, n, uv);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) gv[j] = silu_mul_f32(gv[j], uv[j]);
  if (vec) store8<true>(o, 8, gv);
  else store8<false>(o, n, gv);
}

struct SiluMulOp {
  const uint16_t* gate;
  const uint16_t* up;
  uint16_t* out;
  template <bool kVec>
  __device__ __forceinline__ void run(int64_t e0, int n) const {
    silu8(gate + e0, up + e0, out + e0, n, kVec);
  }
};

struct SiluMulFusedOp {
  const uint16_t* gate_up;
  uint16_t* out;
  int64_t cols;
  template <bool kVec>
  __device__ __forceinline__ void run(int64_t e0, int n) const {
    // kVec needs cols % 8 == 0, so 8 elements never cross a row; the scalar path has n = 1.
    const int64_t row = e0 / cols;
    const uint16_t* g = gate_up + e0 + row * cols;  // row · 2·cols + (e0 − row · cols)
    silu8(g, g + cols, out + e0, n, kVec);
  }
};

struct ToFloatOp {
  const uint16_t* x;
  float* out;
  template <bool kVec>
  __device__ __forceinline__ void run(int64_t e0, int n) const {
    float v[8];
    load8<kVec>(x + e0, n, v);
    store8<kVec>(out + e0, n, v);
  }
};

template <bool kVec, class Op>
__global__ void __launch_bounds__(kElementwiseThreads) elementwise_kernel(Op op, int64_t n) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    const int64_t nvec = n / 8;
    for (int64_t v = tid; v < nvec; v += stride) op.template run<true>(v * 8, 8);
    if (tid < n - nvec * 8) op.template run<false>(nvec * 8 + tid, 1);
  } else {
    for (int64_t e = tid; e < n; e += stride) op.template run<false>(e, 1);
  }
}

// ---- embedding / gather -------------------------------------------------------------------------

__device__ __forceinline__ bool id_ok(int32_t id, int64_t limit) { return id >= 0 && (limit <= 0 || id < limit); }

// Rows of ids − id0 below `limit` are copied; any other row is filled with `outside` (the BF16
// bits of NaN for a bad id of a whole table, +0 for an id of another rank's vocabulary shard).
template <bool kVec>
__global__ void __launch_bounds__(kCopyMaxThreads) gather_bf16_kernel(const uint16_t* table, const int32_t* ids,
                                                                     int64_t limit, int dim, uint16_t* out,
                                                                     int32_t id0, uint16_t outside) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r] - id0;
  const bool ok = id_ok(id, limit);
  const uint16_t* src = table + int64_t(ok ? id : 0) * dim;
  uint16_t* dst = out + r * dim;
  if constexpr (kVec) {
    const uint32_t pair = uint32_t(outside) * 0x10001u;
    const uint4 fill = make_uint4(pair, pair, pair, pair);
    for (int v = int(threadIdx.x); v < dim / 8; v += int(blockDim.x))
      reinterpret_cast<uint4*>(dst)[v] = ok ? __ldg(reinterpret_cast<const uint4*>(src) + v) : fill;
  } else {
    for (int c = int(threadIdx.x); c < dim; c += int(blockDim.x)) dst[c] = ok ? src[c] : outside;
  }
}

template <bool kVec, Fp8Format kFormat>
__global__ void __launch_bounds__(kCopyMaxThreads) embedding_fp8_kernel(const uint8_t* codes, const float* scales,
                                                                       const int32_t* ids, int64_t limit, int dim,
                                                                       uint16_t* out, int32_t id0, uint16_t outside) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r] - id0;
  const bool ok = id_ok(id, limit);
  uint16_t* dst = out + r * dim;
  if (!ok) {  // as gather_bf16_kernel
    for (int c = int(threadIdx.x); c < dim; c += int(blockDim.x)) dst[c] = outside;
    return;
  }
  const uint8_t* src = codes + int64_t(id) * dim;
  // cpu_ops: fp8_to_float(code) · scale, one float product.
  const float scale = scales[id];
  if constexpr (kVec) {
    for (int v = int(threadIdx.x); v < dim / 8; v += int(blockDim.x)) {
      const uint2 c = __ldg(reinterpret_cast<const uint2*>(src) + v);
      float f[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const auto code = static_cast<uint8_t>((j < 4 ? c.x : c.y) >> (8 * (j % 4)));
        f[j] = __fmul_rn(device_fp8_to_float(code, kFormat), scale);
      }
      store8<true>(dst + v * 8, 8, f);
    }
  } else {
    for (int c = int(threadIdx.x); c < dim; c += int(blockDim.x))
      dst[c] = static_cast<uint16_t>(bf16_bits(__fmul_rn(device_fp8_to_float(src[c], kFormat), scale)));
  }
}

// One CTA per output row segment: out row r, block p ← parts block p, row r.
template <bool kVec>
__global__ void __launch_bounds__(kCopyMaxThreads) interleave_blocks_kernel(const uint16_t* parts, int blocks,
                                                                           int64_t rows, int cols, uint16_t* out) {
  pdl_wait();
  pdl_release();
  const int64_t r = blockIdx.x / blocks;
  const int p = int(blockIdx.x % blocks);
  const uint16_t* src = parts + (int64_t(p) * rows + r) * cols;
  uint16_t* dst = out + (r * blocks + p) * cols;
  if constexpr (kVec) {
    for (int v = int(threadIdx.x); v < cols / 8; v += int(blockDim.x))
      reinterpret_cast<uint4*>(dst)[v] = __ldg(reinterpret_cast<const uint4*>(src) + v);
  } else {
    for (int c = int(threadIdx.x); c < cols; c += int(blockDim.x)) dst[c] = src[c];
  }
}

// ---- argmax -------------------------------------------------------------------------------------

constexpr int32_t kNone = INT_MAX;  // no value seen yet

// Whether (v, i) beats (bv, bi): larger, or equal with the lower index. A NaN v never does.
__device__ __forceinline__ bool beats(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void consider(float v, int32_t i, float& bv, int32_t& bi) {
  if (beats(v, i, bv, bi)) bv = v, bi = i;
}

__device__ __forceinline__ float element(const uint16_t* p, int i) { return bf16_bits_to_float(p[i]); }
__device__ __forceinline__ float element(const float* p, int i) { return p[i]; }

// The values of one 16-byte vector whose first element has index i0.
__device__ __forceinline__ void consider_vector(const uint4& r, int32_t i0, const uint16_t*, float& bv, int32_t& bi) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    consider(__uint_as_float(w[j] << 16), i0 + 2 * j, bv, bi);
    consider(__uint_as_float(w[j] & 0xFFFF0000u), i0 + 2 * j + 1, bv, bi);
  }
}
__device__ __forceinline__ void consider_vector(const uint4& r, int32_t i0, const float*, float& bv, int32_t& bi) {
  consider(__uint_as_float(r.x), i0, bv, bi);
  consider(__uint_as_float(r.y), i0 + 1, bv, bi);
  consider(__uint_as_float(r.z), i0 + 2, bv, bi);
  consider(__uint_as_float(r.w), i0 + 3, bv, bi);
}

// Grid: rows × cluster CTAs, clusters of `cluster` CTAs along x, one cluster per row.
template <typename T>
__global__ void __launch_bounds__(kArgmaxMaxThreads) argmax_kernel(const T* logits, int cols, int32_t* out) {
  pdl_wait();  // launch.cuh: nothing of the stream is touched before it
  pdl_release();
  constexpr int kEpv = 16 / int(sizeof(T));  // elements per 16-byte vector
  __shared__ float warp_v[32];
  __shared__ int32_t warp_i[32];
  __shared__ float cta_v;
  __shared__ int32_t cta_i;
  const cg::cluster_group cluster = cg::this_cluster();
  const int csize = int(cluster.num_blocks());
  const int rank = int(cluster.block_rank());
  const int64_t row = blockIdx.x / csize;
  const T* p = logits + row * cols;
  // The row's 16-byte-aligned body [head, body_end), split over the cluster;
  // the elements before and after it go to rank 0.
  const auto misalign = static_cast<int>(reinterpret_cast<uintptr_t>(p) & 15u);
  const int head = min(cols, ((16 - misalign) & 15) / int(sizeof(T)));
  const int nv = (cols - head) / kEpv;
  const int body_end = head + nv * kEpv;
  const int per = (nv + csize - 1) / csize;
  const int v_begin = min(nv, rank * per);
  const int v_end = min(nv, v_begin + per);
  const uint4* vp = reinterpret_cast<const uint4*>(p + head);
  const int step = int(blockDim.x);

  float bv = -INFINITY;
  int32_t bi = kNone;
  int v = v_begin + int(threadIdx.x);
  for (; v + 3 * step < v_end; v += 4 * step) {  // 4 loads in flight
    uint4 r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) r[k] = __ldg(vp + v + k * step);
#pragma unroll
    for (int k = 0; k < 4; ++k) consider_vector(r[k], head + (v + k * step) * kEpv, p, bv, bi);
  }
  for (; v < v_end; v += step) consider_vector(__ldg(vp + v), head + v * kEpv, p, bv, bi);
  if (rank == 0) {
    const int t = int(threadIdx.x);
    if (t < head) consider(element(p, t), t, bv, bi);
    if (t < cols - body_end) consider(element(p, body_end + t), body_end + t, bv, bi);
  }

  // (value desc, index asc) is a total order on the candidates, so the
  // butterfly leaves every lane with the warp's best.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
    consider(ov, oi, bv, bi);
  }
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) warp_v[warp] = bv, warp_i[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bv = -INFINITY;
    bi = kNone;
    if (lane < int(blockDim.x >> 5)) bv = warp_v[lane], bi = warp_i[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
      const int32_t oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      consider(ov, oi, bv, bi);
    }
    if (lane == 0) cta_v = bv, cta_i = bi;
  }
  cluster.sync();  // every CTA's result is in its shared memory
  if (rank == 0 && threadIdx.x == 0) {
    for (int c = 1; c < csize; ++c)
      consider(*cluster.map_shared_rank(&cta_v, c), *cluster.map_shared_rank(&cta_i, c), bv, bi);
    out[row] = bi == kNone ? -1 : bi;
  }
  cluster.sync();  // no CTA leaves while rank 0 may still read its shared memory
}

// ---- host side ---------------------------------------------------------------------------------

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int round_up32(int64_t n) { return int(cdiv(n, 32) * 32); }

uint16_t* bits(__nv_bfloat16* p) { return reinterpret_cast<uint16_t*>(p); }
const uint16_t* bits(const __nv_bfloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw Error(std::string("cuda ") + op + ": " + what);
}

// rows: one CTA (or cluster) each, so < 2^31; cols: int-indexed inside a row.
void check_shape(const char* op, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    fail(op, "shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "] has a negative dimension");
  if (rows > INT_MAX) fail(op, "at most 2^31 - 1 rows, got " + std::to_string(rows));
  if (cols > (int64_t(1) << 30)) fail(op, "rows of at most 2^30 elements, got " + std::to_string(cols));
}

void check_ptrs(const char* op, std::initializer_list<std::pair<const void*, const char*>> ptrs) {
  for (const auto& [p, name] : ptrs)
    if (p == nullptr) fail(op, std::string(name) + " is null");
}

void check_launch() { FP8LM_CUDA_CHECK(cudaGetLastError()); }

// Row stride: 0 means dense; otherwise ≥ cols.
int64_t row_stride(const char* op, int64_t ld, int64_t cols, const char* name) {
  if (ld == 0) return cols;
  if (ld < cols)
    fail(op, std::string(name) + " row stride " + std::to_string(ld) + " is below its width " + std::to_string(cols));
  return ld;
}

// heads in a row of `cols`, each head_dim wide.
int heads_of(const char* op, int64_t cols, int64_t head_dim, const char* name) {
  if (cols % head_dim != 0)
    fail(op, std::string(name) + " width " + std::to_string(cols) + " is not a multiple of head_dim " +
                 std::to_string(head_dim));
  return int(cols / head_dim);
}

void check_head_dim(const char* op, int64_t head_dim) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    fail(op, "head_dim must be in [1, " + std::to_string(kMaxHeadDim) + "], got " + std::to_string(head_dim));
}

// -- row norms

// Returns false where the rows take the streaming kernel, which does not quantize (a.quant:
// the caller quantizes out afterwards).
template <bool kVec, bool kAdd>
bool launch_norm_vec(const NormArgs& a, int64_t rows, cudaStream_t stream) {
  // Up to 4 vectors per thread in CTAs of up to 256 threads, then up to 512
  // threads with 4, then 8 (quant_kernels' measurements on the H200: 2 × 256
  // beats 1 × 512, 4 × 448 beats 8 × 224).
  int vpt = 1;
  while (vpt < 4 && cdiv(a.nv, vpt) > 256) vpt *= 2;
  if (cdiv(a.nv, vpt) > 256)
    while (vpt < 8 && cdiv(a.nv, vpt) > kNormMaxThreads) vpt *= 2;
  const int threads = std::max(32, round_up32(cdiv(a.nv, vpt)));
  const auto grid = static_cast<unsigned>(rows);
  if (detail::model_kernel_tuning().force_streaming_norm || threads > kNormMaxThreads) {
    const int st = std::min(kNormStreamThreads, std::max(32, round_up32(a.nv)));
    NormArgs plain = a;
    plain.quant = false;
    launch_dependent(rms_norm_streaming_kernel<kVec, kAdd>, grid, st, 0, stream, plain);
    check_launch();
    return false;
  }
  const size_t smem = a.quant ? size_t(a.q.ngroups) * sizeof(unsigned) : 0;
  switch (vpt) {
    case 1: launch_dependent(rms_norm_kernel<1, kVec, kAdd>, grid, threads, smem, stream, a); break;
    case 2: launch_dependent(rms_norm_kernel<2, kVec, kAdd>, grid, threads, smem, stream, a); break;
    case 4: launch_dependent(rms_norm_kernel<4, kVec, kAdd>, grid, threads, smem, stream, a); break;
    default: launch_dependent(rms_norm_kernel<8, kVec, kAdd>, grid, threads, smem, stream, a); break;
  }
  check_launch();
  return true;
}

// The norm, and with `quant` the quantization of its output: in the same kernel where the rows
// take the register kernel, else by the quantization kernel right after (the same bits).
template <bool kAdd>
void launch_norm(NormArgs a, int64_t rows, const RowQuantOutput* quant, cudaStream_t stream) {
  const char* op = kAdd ? "add_rms_norm" : "rms_norm";
  if (quant != nullptr) {
    a.q = row_quant_params(op, rows, a.cols, quant->q, quant->codes, quant->scales);
    a.quant = true;
  }
  const bool vec = a.cols % 8 == 0 && aligned16(a.x) && aligned16(a.w) && aligned16(a.out) &&
                   (!kAdd || aligned16(a.delta)) && (quant == nullptr || aligned16(quant->codes));
  const bool fused = vec ? launch_norm_vec<true, kAdd>(a, rows, stream) : launch_norm_vec<false, kAdd>(a, rows, stream);
  if (quant == nullptr || fused) return;
  const auto* out = reinterpret_cast<const __nv_bfloat16*>(a.out);
  if (quant->q.static_scale != nullptr)
    quantize_fp8_static(out, rows, a.cols, quant->q.static_scale, quant->codes, stream, quant->q.format);
  else
    quantize_fp8_dynamic(out, rows, a.cols, quant->q, quant->codes, quant->scales, stream);
}

// -- head norms

template <int VPL>
void launch_head_norm_vpl(const HeadNormArgs& a, bool vec, cudaStream_t stream) {
  const int64_t threads_needed = a.total * a.group;
  const auto grid = static_cast<unsigned>(cdiv(threads_needed, kHeadNormThreads));
  if (vec) launch_dependent(head_rms_norm_kernel<VPL, true>, grid, kHeadNormThreads, 0, stream, a);
  else launch_dependent(head_rms_norm_kernel<VPL, false>, grid, kHeadNormThreads, 0, stream, a);
  check_launch();
}

void head_norm_impl(const char* op, __nv_bfloat16* q, int64_t q_cols, const float* q_w, int64_t q_ld,
                    __nv_bfloat16* k, int64_t k_cols, const float* k_w, int64_t k_ld, int64_t rows,
                    int64_t head_dim, float eps, cudaStream_t stream) {
  check_shape(op, rows, std::max(q_cols, k_cols));
  check_shape(op, rows, std::min(q_cols, k_cols));
  check_head_dim(op, head_dim);
  HeadNormArgs a;
  a.heads0 = heads_of(op, q_cols, head_dim, "q");
  a.heads1 = heads_of(op, k_cols, head_dim, "k");
  a.ld0 = row_stride(op, q_ld, q_cols, "q");
  a.ld1 = row_stride(op, k_ld, k_cols, "k");
  const int64_t total = rows * (a.heads0 + a.heads1);
  if (total == 0) return;
  if (a.heads0 > 0) check_ptrs(op, {{q, "x"}, {q_w, "weight"}});
  if (a.heads1 > 0) check_ptrs(op, {{k, "k"}, {k_w, "k weight"}});
  if (total * 32 > int64_t(UINT_MAX)) fail(op, "too many heads: " + std::to_string(total));
  a.x0 = bits(q);
  a.x1 = bits(k);
  a.w0 = q_w;
  a.w1 = k_w;
  a.total = total;
  a.head_dim = int(head_dim);
  a.eps = eps;
  const HeadLanes lanes = head_lanes(int(head_dim));  // the layout the fused q/k/v kernel shares
  a.group = lanes.group;
  bool vec = head_dim % 8 == 0;
  if (a.heads0 > 0) vec = vec && a.ld0 % 8 == 0 && aligned16(q) && aligned16(q_w);
  if (a.heads1 > 0) vec = vec && a.ld1 % 8 == 0 && aligned16(k) && aligned16(k_w);
  switch (lanes.vpl) {
    case 1: launch_head_norm_vpl<1>(a, vec, stream); break;
    case 2: launch_head_norm_vpl<2>(a, vec, stream); break;
    default: launch_head_norm_vpl<4>(a, vec, stream); break;  // head_dim ≤ 1024: ≤ 4 vectors per lane
  }
}

// -- rope

void rope_impl(const char* op, __nv_bfloat16* q, int64_t q_cols, int64_t q_ld, __nv_bfloat16* k, int64_t k_cols,
               int64_t k_ld, int64_t rows, int64_t head_dim, const int32_t* positions, const float* inv_freq,
               float attention_factor, cudaStream_t stream) {
  check_shape(op, rows, std::max(q_cols, k_cols));
  check_shape(op, rows, std::min(q_cols, k_cols));
  check_head_dim(op, head_dim);
  if (head_dim % 2 != 0) fail(op, "head_dim must be even, got " + std::to_string(head_dim));
  RopeArgs a;
  a.heads0 = heads_of(op, q_cols, head_dim, "q");
  a.heads1 = heads_of(op, k_cols, head_dim, "k");
  a.ld0 = row_stride(op, q_ld, q_cols, "q");
  a.ld1 = row_stride(op, k_ld, k_cols, "k");
  if (rows == 0 || a.heads0 + a.heads1 == 0) return;
  check_ptrs(op, {{positions, "positions"}, {inv_freq, "inv_freq"}});
  if (a.heads0 > 0) check_ptrs(op, {{q, "x"}});
  if (a.heads1 > 0) check_ptrs(op, {{k, "k"}});
  a.x0 = bits(q);
  a.x1 = bits(k);
  a.head_dim = int(head_dim);
  a.half = int(head_dim / 2);
  a.positions = positions;
  a.inv_freq = inv_freq;
  a.attention_factor = attention_factor;
  bool vec = a.half % 8 == 0;
  if (a.heads0 > 0) vec = vec && a.ld0 % 8 == 0 && aligned16(q);
  if (a.heads1 > 0) vec = vec && a.ld1 % 8 == 0 && aligned16(k);
  const int64_t tasks = int64_t(a.heads0 + a.heads1) * (vec ? a.half / 8 : a.half);
  if (tasks > INT_MAX) fail(op, "rows too wide");
  const int threads = std::clamp(round_up32(tasks), 32, kRopeMaxThreads);
  const size_t smem = size_t(head_dim) * sizeof(float);
  const auto grid = static_cast<unsigned>(rows);
  if (vec) launch_dependent(rope_kernel<true>, grid, threads, smem, stream, a);
  else launch_dependent(rope_kernel<false>, grid, threads, smem, stream, a);
  check_launch();
}

// -- element-wise

template <class Op>
void launch_elementwise(const Op& op, int64_t n, bool vec, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t units = vec ? std::max<int64_t>(n / 8, 1) : n;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(cdiv(units, kElementwiseThreads), 132 * 32));
  if (vec) launch_dependent(elementwise_kernel<true, Op>, grid, kElementwiseThreads, 0, stream, op, n);
  else launch_dependent(elementwise_kernel<false, Op>, grid, kElementwiseThreads, 0, stream, op, n);
  check_launch();
}

void check_count(const char* op, int64_t n) {
  if (n < 0) fail(op, "negative element count " + std::to_string(n));
}

// -- gather

void check_gather(const char* op, int64_t rows, int64_t cols, int64_t limit) {
  check_shape(op, rows, cols);
  if (limit < 0) fail(op, "negative row count of the source " + std::to_string(limit));
  if (limit > INT_MAX) fail(op, "int32 ids address at most 2^31 - 1 rows, got " + std::to_string(limit));
}

int copy_threads(int64_t units) { return std::clamp(round_up32(units), 32, kCopyMaxThreads); }

void gather_impl(const char* op, const __nv_bfloat16* table, const int32_t* ids, int64_t rows, int64_t cols,
                 __nv_bfloat16* out, int64_t limit, cudaStream_t stream, int32_t id0 = 0, uint16_t outside = kBf16Nan) {
  check_gather(op, rows, cols, limit);
  if (rows == 0 || cols == 0) return;
  check_ptrs(op, {{table, "table"}, {ids, "ids"}, {out, "out"}});
  const bool vec = cols % 8 == 0 && aligned16(table) && aligned16(out);
  const auto grid = static_cast<unsigned>(rows);
  if (vec)
    launch_dependent(gather_bf16_kernel<true>, grid, copy_threads(cols / 8), 0, stream, bits(table), ids, limit, int(cols), bits(out), id0, outside);
  else
    launch_dependent(gather_bf16_kernel<false>, grid, copy_threads(cols), 0, stream, bits(table), ids, limit, int(cols), bits(out), id0, outside);
  check_launch();
}

// -- argmax

template <typename T>
void argmax_impl(const T* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream) {
  constexpr const char* op = "argmax_rows";
  check_shape(op, rows, cols);
  if (rows == 0) return;
  check_ptrs(op, {{out, "out"}});
  if (cols > 0) check_ptrs(op, {{logits, "logits"}});
  constexpr int kEpv = 16 / int(sizeof(T));
  const int64_t nv = cols / kEpv;
  const int tuned = detail::model_kernel_tuning().argmax_cluster;
  // A CTA takes about 4 vectors per thread before the row is split further.
  const int cluster = tuned > 0 ? std::min(tuned, kArgmaxMaxCluster)
                                : int(std::clamp<int64_t>(cdiv(nv, kArgmaxMaxThreads * 4), 1, kArgmaxMaxCluster));
  if (rows * cluster > INT_MAX) fail(op, "too many rows: " + std::to_string(rows));
  const int threads = std::clamp(round_up32(cdiv(nv, cluster)), 32, kArgmaxMaxThreads);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows * cluster));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  FP8LM_CUDA_CHECK(cudaLaunchKernelEx(&config, argmax_kernel<T>, logits, int(cols), out));
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

void embedding_bf16(const __nv_bfloat16* table, const int32_t* ids, int64_t rows, int64_t dim, __nv_bfloat16* out,
                    cudaStream_t stream, int64_t vocab) {
  gather_impl("embedding_bf16", table, ids, rows, dim, out, vocab, stream);
}

void embedding_shard_bf16(const __nv_bfloat16* table, const int32_t* ids, int64_t rows, int64_t dim,
                          __nv_bfloat16* out, cudaStream_t stream, int64_t vocab0, int64_t shard_rows) {
  if (vocab0 < 0 || vocab0 > INT_MAX || shard_rows <= 0)
    fail("embedding_shard_bf16", "shard [" + std::to_string(vocab0) + ", +" + std::to_string(shard_rows) + ")");
  gather_impl("embedding_shard_bf16", table, ids, rows, dim, out, shard_rows, stream, int32_t(vocab0), 0);
}

void embedding_fp8(const uint8_t* codes, const float* row_scales, Fp8Format format, const int32_t* ids,
                   int64_t rows, int64_t dim, __nv_bfloat16* out, cudaStream_t stream, int64_t vocab,
                   int64_t vocab0, bool shard) {
  constexpr const char* op = "embedding_fp8";
  check_gather(op, rows, dim, vocab);
  if (vocab0 < 0 || vocab0 > INT_MAX || (shard && vocab <= 0))
    fail(op, "shard [" + std::to_string(vocab0) + ", +" + std::to_string(vocab) + ")");
  const auto id0 = int32_t(vocab0);
  const uint16_t outside = shard ? 0 : kBf16Nan;
  if (format != Fp8Format::kE4M3 && format != Fp8Format::kE5M2) fail(op, "unknown FP8 format");
  if (rows == 0 || dim == 0) return;
  check_ptrs(op, {{codes, "codes"}, {row_scales, "row_scales"}, {ids, "ids"}, {out, "out"}});
  const bool vec = dim % 8 == 0 && reinterpret_cast<uintptr_t>(codes) % 8 == 0 && aligned16(out);
  const auto grid = static_cast<unsigned>(rows);
  const int threads = copy_threads(vec ? dim / 8 : dim);
  uint16_t* o = bits(out);
  const int d = int(dim);
  if (format == Fp8Format::kE4M3) {
    if (vec) launch_dependent(embedding_fp8_kernel<true, Fp8Format::kE4M3>, grid, threads, 0, stream, codes, row_scales, ids, vocab, d, o, id0, outside);
    else launch_dependent(embedding_fp8_kernel<false, Fp8Format::kE4M3>, grid, threads, 0, stream, codes, row_scales, ids, vocab, d, o, id0, outside);
  } else {
    if (vec) launch_dependent(embedding_fp8_kernel<true, Fp8Format::kE5M2>, grid, threads, 0, stream, codes, row_scales, ids, vocab, d, o, id0, outside);
    else launch_dependent(embedding_fp8_kernel<false, Fp8Format::kE5M2>, grid, threads, 0, stream, codes, row_scales, ids, vocab, d, o, id0, outside);
  }
  check_launch();
}

void interleave_column_blocks(const __nv_bfloat16* parts, int64_t blocks, int64_t rows, int64_t cols,
                              __nv_bfloat16* out, cudaStream_t stream) {
  constexpr const char* op = "interleave_column_blocks";
  check_shape(op, rows, cols);
  if (blocks <= 0 || blocks > 1024) fail(op, std::to_string(blocks) + " blocks");
  if (rows * blocks > INT_MAX) fail(op, std::to_string(rows * blocks) + " row segments");
  if (rows == 0 || cols == 0) return;
  check_ptrs(op, {{parts, "parts"}, {out, "out"}});
  const bool vec = cols % 8 == 0 && aligned16(parts) && aligned16(out);
  const auto grid = static_cast<unsigned>(rows * blocks);
  if (vec)
    launch_dependent(interleave_blocks_kernel<true>, grid, copy_threads(cols / 8), 0, stream, bits(parts), int(blocks), rows, int(cols), bits(out));
  else
    launch_dependent(interleave_blocks_kernel<false>, grid, copy_threads(cols), 0, stream, bits(parts), int(blocks), rows, int(cols), bits(out));
  check_launch();
}

void gather_rows(const __nv_bfloat16* x, int64_t cols, const int32_t* rows_idx, int64_t n_rows, __nv_bfloat16* out,
                 cudaStream_t stream, int64_t x_rows) {
  gather_impl("gather_rows", x, rows_idx, n_rows, cols, out, x_rows, stream);
}

void rms_norm(const __nv_bfloat16* x, const float* w, float eps, int64_t rows, int64_t cols, __nv_bfloat16* out,
              cudaStream_t stream, const RowQuantOutput* quant) {
  constexpr const char* op = "rms_norm";
  check_shape(op, rows, cols);
  if (rows == 0 || cols == 0) return;
  check_ptrs(op, {{x, "x"}, {w, "weight"}, {out, "out"}});
  NormArgs a;
  a.x = bits(x);
  a.w = w;
  a.out = bits(out);
  a.eps = eps;
  a.cols = int(cols);
  a.nv = int(cdiv(cols, 8));
  launch_norm<false>(a, rows, quant, stream);
}

void add_rms_norm(__nv_bfloat16* h, const __nv_bfloat16* delta, const float* w, float eps, int64_t rows,
                  int64_t cols, __nv_bfloat16* out, cudaStream_t stream, const RowQuantOutput* quant) {
  constexpr const char* op = "add_rms_norm";
  check_shape(op, rows, cols);
  if (rows == 0 || cols == 0) return;
  check_ptrs(op, {{h, "h"}, {delta, "delta"}, {w, "weight"}, {out, "out"}});
  NormArgs a;
  a.x = bits(h);
  a.delta = bits(delta);
  a.h = bits(h);
  a.w = w;
  a.out = bits(out);
  a.eps = eps;
  a.cols = int(cols);
  a.nv = int(cdiv(cols, 8));
  launch_norm<true>(a, rows, quant, stream);
}

void head_rms_norm(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t head_dim, const float* w, float eps,
                   cudaStream_t stream, int64_t ld) {
  head_norm_impl("head_rms_norm", x, cols, w, ld, nullptr, 0, nullptr, 0, rows, head_dim, eps, stream);
}

void head_rms_norm_qk(__nv_bfloat16* q, int64_t q_cols, const float* q_w, __nv_bfloat16* k, int64_t k_cols,
                      const float* k_w, int64_t rows, int64_t head_dim, float eps, cudaStream_t stream, int64_t q_ld,
                      int64_t k_ld) {
  head_norm_impl("head_rms_norm_qk", q, q_cols, q_w, q_ld, k, k_cols, k_w, k_ld, rows, head_dim, eps, stream);
}

void add(__nv_bfloat16* acc, const __nv_bfloat16* x, int64_t n, cudaStream_t stream) {
  check_count("add", n);
  if (n == 0) return;
  check_ptrs("add", {{acc, "acc"}, {x, "x"}});
  launch_elementwise(AddOp{bits(acc), bits(x)}, n, aligned16(acc) && aligned16(x), stream);
}

void silu_mul(const __nv_bfloat16* gate, const __nv_bfloat16* up, int64_t n, __nv_bfloat16* out,
              cudaStream_t stream) {
  check_count("silu_mul", n);
  if (n == 0) return;
  check_ptrs("silu_mul", {{gate, "gate"}, {up, "up"}, {out, "out"}});
  launch_elementwise(SiluMulOp{bits(gate), bits(up), bits(out)}, n,
                     aligned16(gate) && aligned16(up) && aligned16(out), stream);
}

void silu_mul_fused(const __nv_bfloat16* gate_up, int64_t rows, int64_t cols, __nv_bfloat16* out,
                    cudaStream_t stream) {
  constexpr const char* op = "silu_mul_fused";
  if (rows < 0 || cols < 0)
    fail(op, "shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "] has a negative dimension");
  if (cols > 0 && rows > INT64_MAX / 2 / cols) fail(op, "shape too large");
  if (rows == 0 || cols == 0) return;
  check_ptrs(op, {{gate_up, "gate_up"}, {out, "out"}});
  launch_elementwise(SiluMulFusedOp{bits(gate_up), bits(out), cols}, rows * cols,
                     cols % 8 == 0 && aligned16(gate_up) && aligned16(out), stream);
}

void bf16_to_float(const __nv_bfloat16* x, int64_t n, float* out, cudaStream_t stream) {
  check_count("bf16_to_float", n);
  if (n == 0) return;
  check_ptrs("bf16_to_float", {{x, "x"}, {out, "out"}});
  launch_elementwise(ToFloatOp{bits(x), out}, n, aligned16(x) && aligned16(out), stream);
}

void rope(__nv_bfloat16* x, int64_t rows, int64_t cols, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, float attention_factor, cudaStream_t stream, int64_t ld) {
  rope_impl("rope", x, cols, ld, nullptr, 0, 0, rows, head_dim, positions, inv_freq, attention_factor, stream);
}

void rope_qk(__nv_bfloat16* q, int64_t q_cols, __nv_bfloat16* k, int64_t k_cols, int64_t rows, int64_t head_dim,
             const int32_t* positions, const float* inv_freq, float attention_factor, cudaStream_t stream,
             int64_t q_ld, int64_t k_ld) {
  rope_impl("rope_qk", q, q_cols, q_ld, k, k_cols, k_ld, rows, head_dim, positions, inv_freq, attention_factor,
            stream);
}

void argmax_rows(const __nv_bfloat16* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream) {
  argmax_impl(bits(logits), rows, cols, out, stream);
}

void argmax_rows(const float* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t stream) {
  argmax_impl(logits, rows, cols, out, stream);
}

}  // namespace fp8lm::cuda
