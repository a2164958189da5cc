// A checkpoint directory, read and checked: the architecture (config.json),
// one quantization scheme per linear layer and the KV-cache scheme (the
// checkpoint's quantization_config with the command line's overrides), and
// proof that the safetensors files hold exactly the tensors those imply —
// every weight, bias, norm and scale with the right dtype and shape, and
// nothing unexpected. Only headers are read; tensor bytes stay on disk.
//
// This is what `inspect` prints and what the loader (issue 6) will load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint_files.h"
#include "io/load_overrides.h"
#include "io/quant_config.h"
#include "spec/model_config.h"
#include "spec/model_tensors.h"

namespace fp8lm::io {

// A module name with its indices as "*" ("model.layers.3.mlp.experts.17.up_proj" ->
// "model.layers.*.mlp.experts.*.up_proj"): what groups a model's layers in inspect and the
// server's model facts.
std::string module_family(std::string_view name);

struct LinearLayerSpec {
  LinearModule module;
  LinearQuantScheme scheme;
  std::string weight_name;         // "<module>.weight"
  std::string weight_scale_name;   // empty unless FP8 weights are read from the checkpoint
  std::string input_scale_name;    // empty unless a static activation scale is read
};

struct DTypeUsage {
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

struct ModelSpec {
  std::filesystem::path directory;
  ModelConfig config;
  CheckpointQuantization quantization;  // overrides applied
  std::vector<LinearLayerSpec> linears;
  std::shared_ptr<const CheckpointFiles> files;  // headers of the checkpoint; null with dummy_weights
  // --load-format dummy: built from config.json alone, no checkpoint files;
  // the loader generates the weights (loader/dummy_weights.h).
  bool dummy_weights = false;

  // Per on-disk dtype name ("BF16", "F8_E4M3", ...).
  std::map<std::string, DTypeUsage> dtypes;
  int64_t parameter_count = 0;  // model parameters, scales not counted

  const KvCacheScheme& kv_cache() const { return quantization.kv_cache; }
};

// Reads `dir` and checks it. Throws fp8lm::Error naming the directory and every
// problem found (up to a few dozen, then "and N more"): a missing tensor, a
// tensor the architecture and schemes do not explain, a wrong dtype or shape.
// With overrides.load_format == kDummy this is read_model_spec_dummy.
ModelSpec read_model_spec(const std::filesystem::path& dir, const LoadOverrides& overrides = {});

// The spec of a model whose weights are generated (--load-format dummy): from
// `dir`/config.json alone (and hf_quant_config.json when present). The
// quantization is the config's quantization_config if any, else none (BF16);
// the overrides then apply exactly as for a real checkpoint. No tensor is
// checked and no KV-cache scale is named (none is stored): `files` is null,
// `dtypes` empty. Throws fp8lm::Error naming config.json or the field at fault.
ModelSpec read_model_spec_dummy(const std::filesystem::path& dir, const LoadOverrides& overrides = {});

// Memory the weights and the KV cache need, as `inspect` reports it.
struct MemoryEstimate {
  uint64_t weights_bf16 = 0;   // every parameter in BF16
  uint64_t weights_fp8 = 0;    // quantized linears as FP8 bytes + float32 scales, the rest BF16
  std::string fp8_scheme;      // what weights_fp8 assumes ("this checkpoint's schemes" or an online scheme)
  uint64_t kv_per_token_bf16 = 0;
  uint64_t kv_per_token_fp8 = 0;  // skip layers counted in BF16
  // MLA only (0 otherwise): what a GQA cache of the same heads would hold a token in BF16 —
  // K (qk_nope + qk_rope wide) and V (v_head_dim) for each of num_key_value_heads heads.
  uint64_t kv_per_token_gqa_bf16 = 0;
};

MemoryEstimate estimate_memory(const ModelSpec& spec);

}  // namespace fp8lm::io
