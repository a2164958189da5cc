// Command-line changes to how a model is loaded, shared by every command that
// loads one (generate, serve, bench, eval, inspect):
//
//   --quantization fp8[:channel|:tensor|:block|:weight-only]   quantize a BF16/F16/F32 checkpoint while loading
//   --kv-cache-dtype auto|bf16|fp32|fp8|fp8_e4m3|fp8_e5m2
//   --kv-cache-dtype-skip-layers 0,1,31            layers whose KV cache stays BF16
//   --keep-bf16 PATTERN (repeatable)               module name or re:<regex> kept unquantized
//   --fp8-embeddings                               embedding table and lm_head in FP8 (per row)
//   --load-format auto|dummy                       dummy: random weights from config.json alone
//
// docs/checkpoints.md ("Loading overrides") explains each and the default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/quant_config.h"
#include "spec/quant_scheme.h"

namespace fp8lm::io {

// Granularity of online (load-time) FP8 quantization.
enum class OnlineQuant : uint8_t {
  kPerTensor,     // one weight scale per layer, dynamic per-tensor activations
  kChannelToken,  // one weight scale per output channel, dynamic per-token activations (default)
  kBlock,         // 128x128 weight blocks, dynamic 1x128 activation groups
  kWeightOnly,    // per-channel weights, activations left in high precision (W8A16)
};
std::string_view name(OnlineQuant q);

// Where the weights come from: the checkpoint's safetensors (auto), or random
// weights of realistic scale generated from config.json alone (dummy:
// io::read_model_spec_dummy + loader/dummy_weights.h), for performance runs.
enum class LoadFormat : uint8_t { kAuto, kDummy };
std::string_view name(LoadFormat f);

struct LoadOverrides {
  std::optional<OnlineQuant> quantization;
  std::optional<KvCacheDType> kv_cache_dtype;
  std::vector<int> kv_cache_skip_layers;
  std::vector<std::string> keep_bf16;  // module names (or ancestors) or "re:<regex>"
  bool fp8_embeddings = false;         // embedding table and lm_head in FP8 too
  LoadFormat load_format = LoadFormat::kAuto;
};

// Flag parsers; each throws fp8lm::Error that names the flag and the value.
OnlineQuant parse_online_quant(std::string_view value);         // "fp8", "fp8:tensor", ...
KvCacheDType parse_kv_cache_dtype(std::string_view value);      // "fp8" == "fp8_e4m3"
std::vector<int> parse_layer_list(std::string_view value);      // "0,1,31"
LoadFormat parse_load_format(std::string_view value);           // "auto", "dummy"

// The scheme online quantization gives every linear layer.
LinearQuantScheme online_scheme(OnlineQuant q);

// Applies the overrides to what the checkpoint says. Errors: online
// quantization of an FP8 checkpoint, --keep-bf16 without online quantization,
// skip layers without an FP8 KV cache, layer indices out of range
// (when num_hidden_layers is given), invalid patterns. On error `quant` is unchanged.
void apply_overrides(CheckpointQuantization& quant, const LoadOverrides& overrides,
                     std::optional<int> num_hidden_layers = std::nullopt);

}  // namespace fp8lm::io
