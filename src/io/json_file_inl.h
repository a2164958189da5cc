// Template definitions for json_file.h.
#pragma once

#include "io/json_value.h"

namespace fp8lm::io {
namespace detail {

template <typename T>
T convert(const nlohmann::json& v, const std::string& key, const std::string& origin) {
  if (!json_holds<T>(v))
    throw Error(origin + ": field '" + key + "' must be " + json_expected_name<T>() + ", got " + v.type_name());
  // reject values that do not fit (e.g. a negative layer count into an unsigned)
  if (!json_fits<T>(v)) throw Error(origin + ": field '" + key + "' is out of range: " + v.dump());
  return v.get<T>();
}

}  // namespace detail

template <typename T>
T required(const nlohmann::json& object, const std::string& key, const std::string& origin) {
  if (!object.is_object()) throw Error(origin + ": expected a JSON object");
  const auto it = object.find(key);
  if (it == object.end()) throw Error(origin + ": required field '" + key + "' is missing");
  return detail::convert<T>(*it, key, origin);
}

template <typename T>
std::optional<T> optional(const nlohmann::json& object, const std::string& key, const std::string& origin) {
  if (!object.is_object()) throw Error(origin + ": expected a JSON object");
  const nlohmann::json* v = json_given(object, key);
  if (v == nullptr) return std::nullopt;
  return detail::convert<T>(*v, key, origin);
}

}  // namespace fp8lm::io
