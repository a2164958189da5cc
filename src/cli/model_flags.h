// The flags every command that loads a model shares (inspect now; generate,
// serve, bench and eval later): the model directory and the load overrides of
// io/load_overrides.h. Parsing errors name the flag and the value.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "io/load_overrides.h"

namespace fp8lm::cli {

struct ModelFlags {
  std::string model;
  std::string quantization;          // "fp8", "fp8:channel", "fp8:tensor", "fp8:block"
  std::string kv_cache_dtype;        // "auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"
  std::string kv_cache_skip_layers;  // "0,1,31"
  std::vector<std::string> keep_bf16;
  bool fp8_embeddings = false;
  std::string load_format = "auto";  // "auto", "dummy"

  // Throws fp8lm::Error for an invalid value.
  io::LoadOverrides overrides() const;
};

// Adds MODEL (positional, or --model) and the override flags to `cmd`.
std::shared_ptr<ModelFlags> add_model_flags(CLI::App* cmd);

}  // namespace fp8lm::cli
