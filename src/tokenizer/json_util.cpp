#include "tokenizer/json_util.h"

#include "io/json_value.h"

namespace fp8lm::tokenizer {

namespace {
std::string type_name(const nlohmann::json& v) { return v.type_name(); }
}  // namespace

bool json_has(const nlohmann::json& object, std::string_view key) { return io::json_given(object, key) != nullptr; }

const nlohmann::json& json_field(const nlohmann::json& object, std::string_view key, const JsonPath& at) {
  if (!object.is_object()) at.fail("must be an object, got " + type_name(object));
  const nlohmann::json* v = io::json_given(object, key);
  if (v == nullptr) (at / key).fail("is missing");
  return *v;
}

std::string json_string(const nlohmann::json& object, std::string_view key, const JsonPath& at) {
  const auto& v = json_field(object, key, at);
  if (!v.is_string()) (at / key).fail("must be a string, got " + type_name(v));
  return v.get<std::string>();
}

std::string json_string_or(const nlohmann::json& object, std::string_view key, const JsonPath& at,
                           std::string fallback) {
  return json_has(object, key) ? json_string(object, key, at) : fallback;
}

bool json_bool_or(const nlohmann::json& object, std::string_view key, const JsonPath& at, bool fallback) {
  if (!json_has(object, key)) return fallback;
  const auto& v = *io::json_given(object, key);
  if (!v.is_boolean()) (at / key).fail("must be a boolean, got " + type_name(v));
  return v.get<bool>();
}

std::uint32_t json_id(const nlohmann::json& value, const JsonPath& at) {
  if (!io::json_is_count(value, 0xFFFFFFF0LL))
    at.fail("must be a non-negative integer id, got " + (value.is_number() ? value.dump() : type_name(value)));
  return static_cast<std::uint32_t>(value.get<std::int64_t>());
}

std::size_t json_size_or(const nlohmann::json& object, std::string_view key, const JsonPath& at,
                         std::size_t fallback) {
  if (!json_has(object, key)) return fallback;
  const auto& v = *io::json_given(object, key);
  if (!io::json_is_count(v))
    (at / key).fail("must be a non-negative integer, got " + (v.is_number() ? v.dump() : type_name(v)));
  return static_cast<std::size_t>(v.get<std::int64_t>());
}

std::string json_type(const nlohmann::json& object, const JsonPath& at) {
  if (!object.is_object()) at.fail("must be an object, got " + type_name(object));
  return json_string(object, "type", at);
}

}  // namespace fp8lm::tokenizer
