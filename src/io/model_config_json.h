// A Hugging Face `config.json` read into a ModelConfig. The data it fills is
// spec (spec/model_config.h), which knows nothing of JSON; this file is the
// only reader, so every field's rules and error texts live in one place.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "spec/model_config.h"

namespace fp8lm::io {

// Parses a config.json object; `origin` (usually the file path) prefixes every
// error message. Validates sizes and their relations; throws fp8lm::Error.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& origin);

// Reads and parses `<model_dir>/config.json`.
ModelConfig read_model_config(const std::filesystem::path& model_dir);

}  // namespace fp8lm::io
