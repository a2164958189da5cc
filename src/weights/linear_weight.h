// The host description of one linear layer's (or an embedding table's)
// weights: what the loader fills and every backend uploads from. It says
// what the weight is (element type, scales, how its input is quantized),
// never how a backend computes with it: each backend plans that at upload.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "numerics/quantize.h"
#include "spec/quant_scheme.h"
#include "weights/element_type.h"

namespace fp8lm::weights {

// `data` points at n × k elements of `element`, row-major [out, in] (the
// checkpoint's layout), into an mmapped file or into memory `owner` keeps
// alive (online quantization, a copy fp8lm made).
struct LinearWeight {
  ElementType element = ElementType::kBF16;
  const void* data = nullptr;
  int64_t n = 0;  // out features
  int64_t k = 0;  // in features
  std::shared_ptr<const void> owner;

  // FP8 only: the dequantization multipliers in the layout's grid (quantize.h:
  // tensor 1, channel N, block [cdiv(N,bn), cdiv(K,bk)], group [N, cdiv(K,g)]),
  // float32, row-major.
  ScaleLayout scale_layout = ScaleLayout::tensor();
  std::vector<float> scales;

  std::vector<float> bias;  // empty, or n values

  // FP8 only: how the input is quantized (kNone = W8A16).
  ActivationQuant activation = ActivationQuant::kNone;
  int64_t activation_group = 128;             // kDynamicGroup
  float activation_scale_upper_bound = 0.0f;  // kDynamicToken: amax clamped to this; 0 = none
  float input_scale = 0.0f;                   // kStaticTensor: the checkpoint's input_scale

  bool is_fp8() const { return fp8lm::is_fp8(element); }
  Fp8Format format() const { return fp8_format(element); }  // FP8 only
  // Bytes held in memory: values at their width plus float32 scales and bias.
  uint64_t resident_bytes() const;
};

// High-precision weights (F32 / BF16 / F16 bytes as on disk, not copied).
LinearWeight high_precision(ElementType e, const void* data, int64_t n, int64_t k);

// FP8 weights as serialized in a checkpoint: `codes` (not copied) with their
// scales (already float32 multipliers), activations as `scheme` says.
// `input_scale` is required (> 0) when the scheme's activation is kStaticTensor.
LinearWeight fp8(const uint8_t* codes, int64_t n, int64_t k, const LinearQuantScheme& scheme,
                 std::vector<float> scales, float input_scale = 0.0f);

// A matrix quantized by fp8lm (online quantization): the weight owns the codes.
LinearWeight from_quantized(QuantizedMatrix q, const LinearQuantScheme& scheme, float input_scale = 0.0f);

// Parts stacked along n (q/k/v, gate/up) as one weight, without its elements (data and owner
// null): the stack's sizes, scales and bias, for a backend that copies each part's elements to
// their rows itself (the CUDA backend uploads them part by part; validate_layout checks the
// result). Per-tensor scales become per-channel rows, a part without bias gets zeros when
// another has one. The parts must share k, element type and scheme (with block scales: 128x128
// blocks and n % 128 == 0): the caller's fuse policy checks that before asking.
LinearWeight stack_rows(std::span<const LinearWeight> parts);

// Throws fp8lm::Error naming what is wrong: sizes, scale count or values,
// bias length, activation settings, a missing static input scale, scale cells
// that do not nest.
void validate(const LinearWeight& w);
// validate without the elements (data may be null): for stack_rows' weights.
void validate_layout(const LinearWeight& w);

// The K length a W8A8 product sums before scaling: the finer of the weight's
// and the activation's scale cells along K (0: all of K). Throws when the two
// do not nest (one must divide the other).
int64_t k_segment(const LinearWeight& w);

// --fp8-embeddings: FP8 E4M3, one scale per row, no activation quantization, so
// the embedding lookup and the output projection both read 1-byte codes.
LinearQuantScheme per_row_embedding_scheme();

// An FP8 w as numerics' QuantizedMatrix: its codes (copied) and its scale grid.
QuantizedMatrix quantized_matrix(const LinearWeight& w);

// The whole of w as float32, row-major [n, k]: its elements widened, or its FP8 codes × their
// scales (numerics' dequantize_f32) — what a backend that runs a layer unquantized reads (MLA's
// up-projections).
std::vector<float> dequantized(const LinearWeight& w);

}  // namespace fp8lm::weights
