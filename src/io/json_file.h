// Reading the JSON files of a checkpoint (config.json, index files,
// tokenizer files) with errors that name the file and what is wrong in it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fp8lm::io {

// Parses a whole file; throws fp8lm::Error "<path>: <what>" when the file is
// missing, unreadable or not valid JSON (with the byte offset of the problem).
nlohmann::json read_json_file(const std::filesystem::path& path);

// Parses JSON text; `origin` names where it came from in error messages.
nlohmann::json parse_json(std::string_view text, const std::string& origin);

// Typed access with errors that name the file and the field:
//   "<origin>: field 'num_hidden_layers' must be an integer, got string"
template <typename T>
T required(const nlohmann::json& object, const std::string& key, const std::string& origin);

template <typename T>
std::optional<T> optional(const nlohmann::json& object, const std::string& key, const std::string& origin);

}  // namespace fp8lm::io

#include "io/json_file_inl.h"
