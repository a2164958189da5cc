// A checkpoint's quantization, read from `quantization_config` in config.json
// (or ModelOpt's hf_quant_config.json): which FP8 scheme each linear layer
// uses and how the KV cache is stored. Supported formats: none, Hugging Face
// "fp8" (block and per-tensor), compressed-tensors FP8, NVIDIA ModelOpt FP8 and
// FBGEMM FP8 (docs/checkpoints.md). Anything else is an error naming the
// format found and listing these.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "io/checkpoint_quantization.h"

namespace fp8lm::io {

// Reads `config["quantization_config"]` (falling back to the 2024 key
// `compression_config`, and to `<model_dir>/hf_quant_config.json` for ModelOpt).
// `model_dir` is also used to name config.json in error messages.
CheckpointQuantization parse_quantization(const nlohmann::json& config,
                                          const std::filesystem::path& model_dir);

// The quant_method values fp8lm reads, for messages and --help.
std::string supported_quantization_formats();

}  // namespace fp8lm::io
