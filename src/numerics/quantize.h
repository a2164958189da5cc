// Quantize / dequantize a 2-D tensor to FP8 with every scale granularity the
// checkpoint formats and kernels use. A scale is always a *multiplier*:
//   real ≈ fp8_to_float(code) × scale,     code = fp8(clamp(x / scale, ±max)).
// (docs/numerics.md; the checkpoint names `weight_scale` and `weight_scale_inv`
// both hold this multiplier.)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "numerics/fp8_format.h"
#include "numerics/kernel_choice.h"

namespace fp8lm {

// Which elements share one scale. For an [rows, cols] tensor:
//   kTensor   one scale                               -> scales [1, 1]
//   kChannel  one per row of a weight [N, K]          -> scales [N, 1]
//   kToken    one per row of an activation [M, K]     -> scales [M, 1]
//   kGroup    1 × group_cols along a row              -> scales [rows, cdiv(cols, g)]
//   kBlock    block_rows × block_cols                 -> scales [cdiv(rows,bn), cdiv(cols,bk)]
// Channel and token are the same arithmetic; they are named apart because the
// checkpoint formats and the GEMMs treat them differently.
enum class Granularity : uint8_t { kTensor, kChannel, kToken, kGroup, kBlock };

std::string_view name(Granularity g);

struct ScaleLayout {
  Granularity granularity = Granularity::kTensor;
  int64_t group_rows = 1;  // rows sharing one scale (block_rows for kBlock)
  int64_t group_cols = 1;  // cols sharing one scale (group size or block_cols)

  static ScaleLayout tensor() { return {Granularity::kTensor, 0, 0}; }
  static ScaleLayout channel() { return {Granularity::kChannel, 1, 0}; }
  static ScaleLayout token() { return {Granularity::kToken, 1, 0}; }
  static ScaleLayout group(int64_t g = 128) { return {Granularity::kGroup, 1, g}; }
  static ScaleLayout block(int64_t bn = 128, int64_t bk = 128) {
    return {Granularity::kBlock, bn, bk};
  }

  bool operator==(const ScaleLayout&) const = default;

  // Shape of the scale grid for a [rows, cols] tensor; throws on invalid sizes.
  int64_t scale_rows(int64_t rows) const;
  int64_t scale_cols(int64_t cols) const;
};

// How a dynamic scale is derived from amax, and in which precision the division
// x / scale happens. Producers differ here and bit-exactness depends on it, so
// every difference is a field (docs/numerics.md "Scale rules").
struct ScaleRule {
  // kF32: scale and quotient in float32 (vLLM's kernels, fp8lm's runtime).
  // kBF16: as PyTorch does for a BF16 model (LLM Compressor / compressed-tensors):
  //        scale = bf16(amax / max), quotient = bf16(x / scale), then the FP8 cast.
  HighPrecision arithmetic = HighPrecision::kF32;
  float amax_floor = 0.0f;  // amax = max(amax, floor) before dividing (vLLM group: 1e-10)
  float scale_floor = 0.0f; // scale = max(scale, floor) (vLLM token: 1 / (448 · 512))
  float zero_scale = 0.0f;  // if > 0: a scale of exactly 0 becomes this (compressed-tensors: eps)
  bool power_of_two = false;  // round the scale up to 2^ceil(log2 s) (DeepSeek "ue8m0")
  // compressed-tensors adds its zero point (0 for symmetric FP8) to the quotient
  // before the cast, which turns a -0 quotient into +0: code 0x00, not 0x80.
  bool add_zero_point = false;

  // fp8lm's dynamic runtime rule: float32, scale floored at 1 / (max · 512)
  // so that an all-zero row or tensor quantizes to zeros instead of NaN.
  static ScaleRule runtime(Fp8Format fmt);
  // vLLM's per-token-group quantization: amax floored at 1e-10.
  static ScaleRule vllm_group();
  // LLM Compressor / compressed-tensors writing a checkpoint of a model whose
  // dtype is `model_dtype` (scales stored in that dtype, eps for a zero scale).
  static ScaleRule compressed_tensors(HighPrecision model_dtype);
};

struct QuantSpec {
  Fp8Format format = Fp8Format::kE4M3;
  ScaleLayout layout = ScaleLayout::tensor();
  ScaleRule rule = ScaleRule::runtime(Fp8Format::kE4M3);
};

// A read-only view of a row-major high-precision matrix.
struct MatrixView {
  const void* data = nullptr;
  HighPrecision dtype = HighPrecision::kF32;
  int64_t rows = 0;
  int64_t cols = 0;

  static MatrixView f32(const float* p, int64_t r, int64_t c) {
    return {p, HighPrecision::kF32, r, c};
  }
  static MatrixView bf16(const uint16_t* p, int64_t r, int64_t c) {
    return {p, HighPrecision::kBF16, r, c};
  }
};

// An FP8 matrix with its scale grid (row-major, scale_rows × scale_cols floats).
struct QuantizedMatrix {
  Fp8Format format = Fp8Format::kE4M3;
  ScaleLayout layout;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> codes;
  int64_t scale_rows = 0;
  int64_t scale_cols = 0;
  std::vector<float> scales;

  float scale_at(int64_t r, int64_t c) const;  // the scale of element (r, c)
};

// Dynamic quantization: scales computed from the data with spec.rule.
QuantizedMatrix quantize_dynamic(const MatrixView& x, const QuantSpec& spec,
                                 KernelChoice kernels = KernelChoice::kAuto);

// Static quantization: scales given (scale_rows × scale_cols, each finite and > 0).
QuantizedMatrix quantize_static(const MatrixView& x, const QuantSpec& spec,
                                std::span<const float> scales,
                                KernelChoice kernels = KernelChoice::kAuto);

// Just the scale grid that quantize_dynamic would use.
std::vector<float> compute_scales(const MatrixView& x, const QuantSpec& spec,
                                  KernelChoice kernels = KernelChoice::kAuto);

// Dequantize to float32 (code × scale, one float multiply: exact products).
std::vector<float> dequantize_f32(const QuantizedMatrix& q,
                                  KernelChoice kernels = KernelChoice::kAuto);
// Dequantize to bfloat16 bit patterns (the float product rounded to nearest-even).
std::vector<uint16_t> dequantize_bf16(const QuantizedMatrix& q,
                                      KernelChoice kernels = KernelChoice::kAuto);

// ---------------------------------------------------------------------------
// Scale conventions of the checkpoint formats.

enum class ScaleConvention : uint8_t {
  // real = code × s. Every on-disk FP8 format: compressed-tensors `weight_scale`,
  // HF/DeepSeek `weight_scale_inv`, ModelOpt/FBGEMM `weight_scale`, `input_scale`,
  // `k_scale`/`v_scale`.
  kDequantMultiplier,
  // s = max / amax, the factor some producers multiply x by while quantizing
  // (AutoFP8, transformers' online FineGrainedFP8); its reciprocal is what they store.
  kQuantMultiplier,
};

// Converts a scale in `convention` to the dequantization multiplier fp8lm uses.
float to_dequant_multiplier(float s, ScaleConvention convention);

// 2^ceil(log2(s)) for finite s > 0, computed exactly (no libm rounding).
float round_up_to_power_of_two(float s);

}  // namespace fp8lm
