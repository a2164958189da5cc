// What a checkpoint's quantization is, as data: the FP8 scheme of each linear
// layer (rules, exclusions) and how the KV cache is stored. io/quant_config
// reads it from config.json; the per-format parsers (io/quant_formats.h) fill it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "io/module_pattern.h"
#include "spec/quant_scheme.h"

namespace fp8lm::io {

// A scheme and the modules it applies to (a compressed-tensors config group,
// or "every linear layer" for the single-scheme formats).
struct QuantRule {
  std::string name;  // "group_0", "all linear layers", ...
  std::vector<ModulePattern> targets;
  LinearQuantScheme scheme;
};

struct CheckpointQuantization {
  // "none", "fp8" (Hugging Face fine-grained / per-tensor), "compressed-tensors",
  // "modelopt", "fbgemm_fp8".
  std::string format = "none";
  std::string variant;  // "block 128x128", "per-tensor", "FP8_PB_WO", "float-quantized", ...
  std::string source;   // the file the description came from

  std::vector<QuantRule> rules;        // most specific target wins, then the first rule
  std::vector<ModulePattern> ignore;   // the format's own exclusion list
  std::vector<ModulePattern> keep_high_precision;  // --keep-bf16
  bool online = false;  // weights quantized while loading (--quantization fp8)
  // HF "fp8" scale_fmt "ue8m0": scales are powers of two, and run-time
  // activation scales must be rounded up to one (DeepSeek V3.1+).
  bool power_of_two_scales = false;
  // --fp8-embeddings: the token embedding table and lm_head stored in FP8
  // (per-row scales, weight-only), which no checkpoint format does.
  bool fp8_embeddings = false;

  KvCacheScheme kv_cache;

  // The scheme of linear module `module_name` (e.g. "model.layers.0.mlp.up_proj").
  // lm_head, embeddings, norms and MoE routers are never quantized: vLLM builds
  // them without a quantization method in every format.
  LinearQuantScheme scheme_for(std::string_view module_name) const;

  // True when FP8 weights are read from the checkpoint.
  bool serialized() const { return format != "none"; }
  std::string describe() const;
};

// True for module names that are never quantized (see scheme_for).
bool never_quantized(std::string_view module_name);

}  // namespace fp8lm::io
