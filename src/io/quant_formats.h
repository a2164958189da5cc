// Internal to io: one parser per quantization format (quant_config.cpp
// dispatches on quant_method). `where` names the file and block in errors.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint_quantization.h"

namespace fp8lm::io::detail {

CheckpointQuantization parse_hf_fp8(const nlohmann::json& qc, const std::string& where);
CheckpointQuantization parse_compressed_tensors(const nlohmann::json& qc, const std::string& where);
// `block` is either a legacy hf_quant_config.json ({"quantization": {...}}) or
// the flat config.json block ({"quant_algo": ..., "quant_method": "modelopt"}).
CheckpointQuantization parse_modelopt(const nlohmann::json& block, const std::string& where);
CheckpointQuantization parse_fbgemm_fp8(const nlohmann::json& qc, const std::string& where);

// A JSON list of module names (null/absent = empty) turned into patterns.
std::vector<ModulePattern> pattern_list(const nlohmann::json& obj, const std::string& key,
                                        PatternStyle style, const std::string& where);

// The one rule of single-scheme formats: every linear layer.
QuantRule all_linear_layers(const LinearQuantScheme& scheme);

// KV scale names, "{layer}" standing for the layer index.
inline constexpr const char* kKvSelfAttnK = "model.layers.{layer}.self_attn.k_scale";  // compressed-tensors >= 0.6
inline constexpr const char* kKvSelfAttnV = "model.layers.{layer}.self_attn.v_scale";
inline constexpr const char* kKvOutputK = "model.layers.{layer}.self_attn.k_proj.output_scale";  // < 0.6, AutoFP8
inline constexpr const char* kKvOutputV = "model.layers.{layer}.self_attn.v_proj.output_scale";
inline constexpr const char* kKvModelOptK = "model.layers.{layer}.self_attn.k_proj.k_scale";
inline constexpr const char* kKvModelOptV = "model.layers.{layer}.self_attn.v_proj.v_scale";

}  // namespace fp8lm::io::detail
