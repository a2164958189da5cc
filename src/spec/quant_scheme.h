// How one linear layer and the KV cache are quantized: the data that checkpoint
// parsers produce, command-line overrides change, and linear layers dispatch on.
// A new scheme is a new combination of these fields, never a code path named
// after a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/fp8_format.h"
#include "numerics/quantize.h"

namespace fp8lm {

// How the input of a linear layer is quantized at run time.
enum class ActivationQuant : uint8_t {
  kNone,            // not quantized: weight-only (W8A16) or an unquantized layer
  kDynamicTensor,   // one scale per call, amax / max
  kDynamicToken,    // one scale per row (token)
  kDynamicGroup,    // one scale per 1 × activation_group along K
  kStaticTensor,    // one calibrated scale from the checkpoint (`input_scale`)
};

std::string_view name(ActivationQuant a);

struct LinearQuantScheme {
  // false: the weight stays in high precision (BF16/F16/F32) and nothing below applies.
  bool quantized = false;

  // --- weights
  Fp8Format weight_format = Fp8Format::kE4M3;
  // tensor: scale [1] or []; channel: [N, 1] or [N]; block: [cdiv(N,bn), cdiv(K,bk)];
  // group: [N, cdiv(K, g)].
  ScaleLayout weight_scales = ScaleLayout::tensor();
  // true: FP8 bytes and scales are read from the checkpoint; false: the weight
  // is high precision on disk and quantized while loading (--quantization fp8).
  bool weights_serialized = true;
  // Suffix of the scale tensor next to `<module>.weight` on disk:
  // "weight_scale" (compressed-tensors, ModelOpt, FBGEMM, HF per-tensor) or
  // "weight_scale_inv" (HF/DeepSeek block format). Both hold the dequantization
  // multiplier (docs/numerics.md §4).
  std::string weight_scale_suffix = "weight_scale";

  // --- activations
  ActivationQuant activation = ActivationQuant::kNone;
  int64_t activation_group = 128;           // for kDynamicGroup
  std::string input_scale_suffix = "input_scale";  // for kStaticTensor
  float activation_scale_upper_bound = 0.0f;  // FBGEMM: per-token amax clamped to this; 0 = none

  // "fp8-e4m3 w:block128x128 a:dynamic-group128", or "bf16 (not quantized)"
  std::string describe() const;
  bool operator==(const LinearQuantScheme&) const = default;
};

// The KV cache's own scheme, independent of the weights'.
// kF32 exists for the CPU reference (exact comparisons); kAuto is the model's
// dtype, BF16 for every checkpoint fp8lm serves.
enum class KvCacheDType : uint8_t { kAuto, kBF16, kF32, kFP8E4M3, kFP8E5M2 };

inline bool is_fp8(KvCacheDType d) { return d == KvCacheDType::kFP8E4M3 || d == KvCacheDType::kFP8E5M2; }

std::string_view name(KvCacheDType d);

struct KvCacheScheme {
  KvCacheDType dtype = KvCacheDType::kAuto;  // kAuto: the model's dtype (BF16)
  // Names of per-layer scales in the checkpoint, with "{layer}" for the layer
  // index, e.g. "model.layers.{layer}.self_attn.k_scale". Empty: none stored.
  std::string k_scale_name;
  std::string v_scale_name;
  std::vector<int> skip_layers;  // layers whose cache stays BF16
  bool operator==(const KvCacheScheme&) const = default;
};

}  // namespace fp8lm
