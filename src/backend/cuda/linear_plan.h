// How the CUDA backend computes one linear layer, decided once at upload from
// the host description (weights::LinearWeight): which kernel serves which
// number of rows m, and which extra scale grids the upload must prepare.
// plan_linear is the only place where the backend's scheme → kernel choices
// live; CudaOps::upload_linear stores the plan, CudaOps::linear executes it.
// Host-only (no device call), so it is tested without a GPU
// (tests/cuda/test_cuda_linear_plan.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/gemm/cutlass_fp8_gemm_args.h"
#include "backend/cuda/gemv/fp8_gemv.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "spec/quant_scheme.h"
#include "weights/linear_weight.h"

namespace fp8lm::cuda {

// W8A8 rows up to which the GEMV beats cuBLASLt (docs/benchmarks.md, "FP8
// weight-streaming GEMV"): at m ≤ 8 it is 1.1–1.6× cuBLASLt's BF16 on every
// Llama-3.1-8B shape, at m = 16 0.64–0.98×, where cuBLASLt's own FP8 GEMM is
// faster on every shape. W8A16 keeps the GEMV to 16 rows (its alternative is a
// dequantized copy and the BF16 GEMM).
constexpr int64_t kGemvRowsW8A8 = 8;

// W8A8 rows up to which the GEMV quantizes its BF16 input itself (quantize_x)
// instead of after a separate quantization kernel (docs/benchmarks.md, issue
// 18): at m = 1-2 it saves 3-4 µs per projection (qkv 11.8 vs 15.3 µs at m = 1),
// from m = 4 every block's pass over whole rows for the amax and its per-element
// division cost more than the kernel it replaces (qkv 17.4 vs 16.2 µs at m = 4,
// 25.1 vs 17.1 at m = 8).
constexpr int64_t kGemvQuantizeRows = 2;

// How rows beyond the GEMV's reach (m > LinearPlan::gemv_max_rows) are computed.
enum class LargeRows : uint8_t {
  kCublasBf16,      // BF16 weights: cuBLASLt BF16 for every m
  kDequantizeBf16,  // W8A16: dequantize to BF16 scratch, cuBLASLt BF16
  kCublasFp8,       // W8A8: cuBLASLt in gemm_mode (the GEMV where cuBLASLt answers "no algorithm")
  kGemvChunks,      // W8A8 cuBLASLt cannot take (alignment, scale mode): the GEMV 16 rows at a time
};

// Rows [m_min, m_max] of a per-token × per-channel W8A8 layer that a CUTLASS GEMM configuration
// takes instead of cuBLASLt, where it measured faster on the layer's shape (kCutlassMeasured,
// linear_plan.cpp: bench_cuda_gemm on the H200).
struct CutlassRows {
  int64_t m_min = 0, m_max = -1;  // empty
  CutlassFp8Config config = CutlassFp8Config::kStreamK128x128;
  bool contains(int64_t m) const { return m >= m_min && m <= m_max; }
};

struct LinearPlan {
  bool fp8 = false;                                         // E4M3 codes on the device (else BF16)
  WeightScaleLayout w_layout = WeightScaleLayout::kTensor;  // the GEMV's weight scale grid
  ActivationQuant activation = ActivationQuant::kNone;      // kNone: W8A16 (or BF16)
  Fp8ActQuant act_quant;  // W8A8; static_scale is the device pointer upload_linear fills in
  Fp8ScaleRule act_rule;  // W8A8: dynamic_scale_rule(act_quant), for the GEMV that quantizes x itself
  ActivationScaleLayout x_layout = ActivationScaleLayout::kNone;
  int64_t gemv_max_rows = 0;  // 0 BF16, kMaxGemvRows W8A16, kGemvRowsW8A8 W8A8
  LargeRows large_rows = LargeRows::kCublasBf16;
  // cuBLASLt's mode for this pairing of weight and activation scales (kNone:
  // none). Set even when the shape keeps cuBLASLt out (kGemvChunks): the upload
  // then still prepares its scale grid, as it always has.
  GemmScaleMode gemm_mode = GemmScaleMode::kNone;
  bool gemm_channel_scales = false;       // kOuterVector: weight scales as [n] (tensor broadcast) at upload
  bool gemm_cublas_block_scales = false;  // kBlock: block scales converted to cuBLASLt's layout at upload
  bool block_rows_mod4_by_gemv = false;   // kBlock: cuBLASLt takes m − m % 4 rows, the GEMV the rest
  // kCublasFp8 outer-vector layers without bias in a build with CUTLASS: the measured CUTLASS
  // ranges of the shape (one so far).
  std::array<CutlassRows, 2> cutlass_rows{};

  // One line, e.g. "w8a8 e4m3 w:channel a:dynamic-token | m<=8 gemv | m>8 cublaslt outer-vector".
  std::string describe() const;
  // Whether a W8A8 input of m rows is quantized by the GEMV while it stages it
  // (kGemvQuantizeRows), so that nothing before it needs to quantize it.
  bool gemv_quantizes_input(int64_t m) const {
    return activation != ActivationQuant::kNone && m <= gemv_max_rows && m <= kGemvQuantizeRows;
  }
  // The measured CUTLASS range that holds m rows, or nullptr (cuBLASLt).
  const CutlassRows* cutlass_at(int64_t m) const {
    for (const CutlassRows& r : cutlass_rows)
      if (r.contains(m)) return &r;
    return nullptr;
  }
};

// Throws fp8lm::Error for what weights::validate_layout refuses and for what the CUDA
// backend does not run: FP8 other than E4M3, weight blocks other than 128x128,
// group weight scales, activation groups other than 128.
LinearPlan plan_linear(const weights::LinearWeight& w);

// Whether `parts` (q/k/v, gate/up) can be uploaded as one weight
// (weights::stack_rows): at least two, one element type and k, and for FP8
// the same activation quantization, static scale and kind of weight scales
// (block scales: 128x128 blocks and every part's n a multiple of 128; tensor
// and channel mix). Throws what weights::validate throws for a bad part.
bool can_fuse(std::span<const weights::LinearWeight> parts);

}  // namespace fp8lm::cuda
