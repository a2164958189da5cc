// The linear layers' GEMMs through cuBLASLt: FP8 E4M3 inputs (or BF16 for the
// baseline), FP32 accumulation, BF16 output, optional BF16 bias, for every
// scale layout fp8lm serves (docs/numerics.md):
//
//   mode          activations a [m, k]            weights b [n, k]                 cuBLASLt scale modes
//   kNone         BF16                            BF16                             (none)
//   kTensor       E4M3, one scale                 E4M3, one scale                  SCALAR_32F × SCALAR_32F
//   kOuterVector  E4M3, per token [m]             E4M3, per channel [n]            OUTER_VEC_32F × OUTER_VEC_32F
//   kBlock        E4M3, 1×128 groups [m, L]       E4M3, 128×128 blocks [nb, L]     VEC128_32F × BLK128x128_32F
//   (L = cdiv(k, 128), nb = cdiv(n, 128))
//
// D = (A·s_a)(B·s_b)ᵀ (+ bias), A = activations, B = weights (PyTorch's
// F.linear convention: y = x·Wᵀ). Scales are dequantization multipliers,
// float32, on the device, in the row-major grids fp8lm's quantizer makes.
//
// How that maps onto cuBLASLt (column-major): our row-major D[m, n] is a
// column-major D'[n, m] = W'·X', where W' = the weights seen as column-major
// [k, n] (ld k) with op T, and X' = the activations as column-major [k, m]
// (ld k) with op N: the "TN" layout Hopper's FP8 kernels require. So cuBLAS's
// "A" is our weight (its M = our n) and cuBLAS's "B" our activations (its N =
// our m): the per-channel vector is cuBLAS's A scale, the per-token vector its
// B scale, and the bias runs along cuBLAS's rows (= our n).
//
// Block scaling wants the scales in cuBLASLt's own layouts (cuBLAS docs,
// "128-element 1D and 128x128 2D block scaling", "Scaling factors layouts"):
//   * the 1×128 activation scales (cuBLAS's B, VEC128) "N-major", i.e. with the
//     tokens contiguous: [L, m] — the transpose of fp8lm's [m, L];
//   * the 128×128 weight scales (cuBLAS's A, BLK128x128) K-major with the
//     stride between weight-block rows a multiple of 4: [nb, roundup(L, 4)] —
//     fp8lm's [nb, L] with each row padded when L % 4 != 0.
// run() converts fp8lm's grids into per-stream scratch with one small kernel
// each (none when the layouts already coincide); callers that produce the
// cuBLASLt layouts directly (a fused quantization kernel, weight scales
// converted once at load) set GemmArgs::cublas_scale_layout and skip that.
//
// Constraints cuBLASLt documents for FP8 on Hopper: k % 16 == 0 and n % 8 == 0
// (16-byte rows), and for block scaling m % 4 == 0 and n % 4 == 0. Where
// cuBLASLt has no algorithm (block scaling at m = 1 for instance), run()
// throws fp8lm::Error naming cuBLASLt's status and the shape; supported() says
// beforehand. Algorithms are cuBLASLt's heuristic choice, cached per (m, n, k,
// mode, bias, pointer alignments) together with their descriptors.
//
// Thread-safety: one CublasLtGemm may serve several streams (each stream gets
// its own workspace and scale scratch, used in stream order), but its methods
// must not be called from several host threads at once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/common/device_memory.h"

namespace fp8lm::cuda {

enum class GemmScaleMode : uint8_t {
  kNone,         // BF16 x BF16
  kTensor,       // a: [1], b: [1]
  kOuterVector,  // a: per-row (token) [m] × b: per-row (channel) [n]
  kBlock,        // a: 1x128 groups [m, cdiv(k,128)] × b: 128x128 blocks [cdiv(n,128), cdiv(k,128)]
};

const char* name(GemmScaleMode mode);

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;   // activations [m, k] row-major: BF16 (kNone) or E4M3 bytes
  const void* b = nullptr;   // weights [n, k] row-major (the checkpoint's [out, in]): BF16 or E4M3
  void* d = nullptr;         // output [m, n] row-major BF16
  const float* a_scale = nullptr;  // device, float32 multipliers, layouts above (row-major as fp8lm's CPU quantizer makes them)
  const float* b_scale = nullptr;
  const void* bias = nullptr;      // BF16 [n] or null
  GemmScaleMode mode = GemmScaleMode::kNone;
  // kBlock only: a_scale is already [L, m] (tokens contiguous) and b_scale
  // [nb, roundup(L, 4)] (see block_scales_to_cublas); no conversion is done.
  bool cublas_scale_layout = false;
};

// Number of floats of the weight block-scale grid in cuBLASLt's layout: nb · roundup(L, 4).
int64_t cublas_block_scale_count(int64_t n, int64_t k);
// fp8lm's activation group scales [m, L] → cuBLASLt's [L, m]. Device pointers, on `stream`.
void group_scales_to_cublas(const float* in, int64_t m, int64_t k, float* out, cudaStream_t stream);
// fp8lm's weight block scales [nb, L] → cuBLASLt's [nb, roundup(L, 4)] (padding zeroed).
void block_scales_to_cublas(const float* in, int64_t n, int64_t k, float* out, cudaStream_t stream);

class CublasLtGemm {
 public:
  // `allocator` provides the workspaces and scale scratch (null: one of its own).
  explicit CublasLtGemm(size_t workspace_bytes = 64ull << 20, DeviceAllocator* allocator = nullptr);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Runs D = (A·s_a)(B·s_b)ᵀ (+ bias) on `stream`; the algorithm is cuBLASLt's heuristic choice, cached per (m, n, k, mode, bias).
  // Throws fp8lm::Error (with cuBLASLt's status name and the shape) when cuBLASLt has no algorithm — e.g. block scaling at small M.
  void run(const GemmArgs& args, cudaStream_t stream);
  bool supported(const GemmArgs& args);  // whether an algorithm exists (cached)
  // (supported() needs only the shape and mode; pointers left null count as
  // 256-byte aligned, which cudaMalloc'd and DeviceAllocator buffers are.)

  // Why the last supported() / run() for this shape found no algorithm ("" if it did).
  std::string unsupported_reason(const GemmArgs& args);
  size_t cached_plans() const;
  DeviceMemoryStats memory_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8lm::cuda
