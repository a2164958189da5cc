// The CPU backend's linear layer: y[M, N] = x[M, K] · Wᵀ (+ bias), for every
// weight storage and quantization scheme fp8lm reads (docs/numerics.md):
//
//   * BF16 / F16 / F32 weights: converted to float32 a tile at a time.
//   * FP8 weights, activation kNone (W8A16, weight-only): each weight tile is
//     dequantized on the fly (code × scale, exact products) and multiplied with
//     the float32 input. The FP8 bytes are never expanded into a full copy.
//   * FP8 weights with quantized activations (W8A8, as the GPU's FP8 GEMMs do):
//     x is quantized with fp8lm's own quantizer (dynamic per tensor / token /
//     group or static per tensor), then y = Σ_blocks (Σ_k code_x · code_w) · s_x · s_w,
//     each K block of the scale grids (128 for block/group schemes) summed on its
//     own in float32 and then scaled ("per-block promotion", DeepSeek / vLLM).
//
// Work is split into fixed tiles of outputs, independent of the thread count,
// so results are identical for any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/thread_pool.h"
#include "numerics/quantize.h"
#include "spec/quant_scheme.h"

namespace fp8lm::cpu {

// One linear layer's weights as the loader fills them, plus how its input is
// quantized. `data` points at N × K elements in `storage` (row-major, as in the
// checkpoint: [out, in]); it may point into an mmapped file, or into memory
// `owner` keeps alive (online quantization).
struct LinearWeights {
  WeightStorage storage = WeightStorage::kBF16;
  const void* data = nullptr;
  int64_t n = 0;  // out features
  int64_t k = 0;  // in features
  std::shared_ptr<const void> owner;  // keeps `data` alive when fp8lm made it

  // FP8 only: element format and the dequantization multipliers in the
  // layout's grid (quantize.h: tensor 1, channel N, block [cdiv(N,bn), cdiv(K,bk)],
  // group [N, cdiv(K,g)]), float32, row-major.
  Fp8Format format = Fp8Format::kE4M3;
  ScaleLayout scale_layout = ScaleLayout::tensor();
  std::vector<float> scales;

  std::vector<float> bias;  // empty, or N values

  // FP8 only: activation quantization (kNone = W8A16).
  ActivationQuant activation = ActivationQuant::kNone;
  int64_t activation_group = 128;            // kDynamicGroup
  float activation_scale_upper_bound = 0.0f; // kDynamicToken: amax clamped to this; 0 = none
  float input_scale = 0.0f;                  // kStaticTensor: the checkpoint's input_scale

  bool is_fp8() const { return storage == WeightStorage::kFP8; }
};

// High-precision weights (BF16 / F16 / F32 bytes as on disk, not copied).
LinearWeights high_precision_weights(WeightStorage storage, const void* data, int64_t n, int64_t k);

// FP8 weights as serialized in a checkpoint: `codes` (not copied) with their
// scales (already float32 multipliers), activations as `scheme` says.
// `input_scale` is required (> 0) when the scheme's activation is kStaticTensor.
LinearWeights fp8_weights(const uint8_t* codes, int64_t n, int64_t k, const LinearQuantScheme& scheme,
                          std::vector<float> scales, float input_scale = 0.0f);

// Online quantization (--quantization fp8): a BF16 weight quantized at load with
// fp8lm's quantizer, in the scheme's weight layout, float32 scales = amax / max
// (ScaleRule::runtime, whose floor only matters for an all-zero block).
LinearWeights quantize_weights_online(const uint16_t* bf16, int64_t n, int64_t k,
                                      const LinearQuantScheme& scheme);
// The same from a BF16 or float32 matrix (an F16 checkpoint is widened to float32 first).
LinearWeights quantize_weights_online(const MatrixView& weight, const LinearQuantScheme& scheme);

// Throws fp8lm::Error naming what is wrong: sizes, scale count or values,
// bias length, activation settings, a missing static input scale.
void validate(const LinearWeights& w);

// The input quantized as the W8A8 path does it (exposed for tests and for
// the GPU backend's comparisons). w.activation must not be kNone.
QuantizedMatrix quantize_activations(const float* x, int64_t m, const LinearWeights& w,
                                     KernelChoice kernels = KernelChoice::kAuto);

// Which inner loops to use (the same choice as the numerics kernels); kAuto = the
// widest this CPU runs.
const LinearKernels& select_linear_kernels(KernelChoice choice);

// y[m, n] = x[m, k] · Wᵀ + bias. x has m·K floats, y has m·N floats (overwritten).
// pool may be null (single thread). Throws fp8lm::Error on bad sizes or weights.
void linear(std::span<const float> x, int64_t m, const LinearWeights& w, std::span<float> y,
            ThreadPool* pool = nullptr, KernelChoice kernels = KernelChoice::kAuto);

}  // namespace fp8lm::cpu
