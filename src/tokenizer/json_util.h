// Reading tokenizer.json sections with errors that name the file and the JSON
// path of the offending field ("tokenizer.json: model.merges[3]: ...").
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fp8lm::tokenizer {

// Where a JSON value sits: the file it came from and its path inside it.
struct JsonPath {
  std::string file;
  std::string path;

  JsonPath operator/(std::string_view key) const {
    return {file, path.empty() ? std::string(key) : path + "." + std::string(key)};
  }
  JsonPath operator[](std::size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(file + ": " + (path.empty() ? std::string("(root)") : path) + ": " + what);
  }
};

// The value of `key` in `object` (which must be a JSON object), checked for type.
const nlohmann::json& json_field(const nlohmann::json& object, std::string_view key, const JsonPath& at);
bool json_has(const nlohmann::json& object, std::string_view key);  // present and not null

std::string json_string(const nlohmann::json& object, std::string_view key, const JsonPath& at);
std::string json_string_or(const nlohmann::json& object, std::string_view key, const JsonPath& at,
                           std::string fallback);
bool json_bool_or(const nlohmann::json& object, std::string_view key, const JsonPath& at, bool fallback);
std::uint32_t json_id(const nlohmann::json& value, const JsonPath& at);  // a non-negative 32-bit integer
std::size_t json_size_or(const nlohmann::json& object, std::string_view key, const JsonPath& at,
                         std::size_t fallback);

// The "type" string of a component object.
std::string json_type(const nlohmann::json& object, const JsonPath& at);

}  // namespace fp8lm::tokenizer
