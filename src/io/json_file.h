// Reading the JSON files of a checkpoint (config.json, index files,
// tokenizer files) with errors that name the file and what is wrong in it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fp8lm::io {

// Parses a whole file; throws fp8lm::Error "<path>: <what>" when the file is
// missing, unreadable or not valid JSON (with the byte offset of the problem).
nlohmann::json read_json_file(const std::filesystem::path& path);

// How deeply JSON may nest arrays and objects (the outermost value is level 1).
// Every JSON fp8lm parses — checkpoint files, request bodies, the JSON inside a
// request's strings (tool-call arguments), a model's tool calls — goes through
// the parsers below, which refuse a container before it is opened past the
// bound: nlohmann's parser is iterative, but copies, dump() and conversions
// (chat::Value::from_json) recurse once per level, so an unbounded depth lets
// a small text overflow the stack.
inline constexpr int kMaxJsonDepth = 128;

// Parses JSON text; `origin` names where it came from in error messages
// ("<origin>: not valid JSON (at byte …)", "<origin> nests arrays and objects
// more than 128 levels deep").
nlohmann::json parse_json(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);
// The same, keeping the keys' order (the server: it shows in chat templates and responses).
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& origin,
                                          int max_depth = kMaxJsonDepth);
// The same without exceptions, for text that may or may not be JSON (a model's
// output): nullopt when it is not, or nests deeper than max_depth.
std::optional<nlohmann::ordered_json> try_parse_ordered_json(std::string_view text, int max_depth = kMaxJsonDepth);

// Typed access with errors that name the file and the field:
//   "<origin>: field 'num_hidden_layers' must be an integer, got string"
template <typename T>
T required(const nlohmann::json& object, const std::string& key, const std::string& origin);

template <typename T>
std::optional<T> optional(const nlohmann::json& object, const std::string& key, const std::string& origin);

}  // namespace fp8lm::io

#include "io/json_file_inl.h"
