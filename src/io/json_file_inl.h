// Template definitions for json_file.h.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

namespace fp8lm::io {
namespace detail {

inline const char* json_type_name(const nlohmann::json& v) { return v.type_name(); }

template <typename T>
bool json_holds(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  else if constexpr (std::is_integral_v<T>) return v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) return v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  else if constexpr (std::is_same_v<T, nlohmann::json>) return true;
  else return false;
}

template <typename T>
const char* expected_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else return "a JSON value";
}

template <typename T>
T convert(const nlohmann::json& v, const std::string& key, const std::string& origin) {
  if (!json_holds<T>(v))
    throw Error(origin + ": field '" + key + "' must be " + expected_name<T>() + ", got " +
                json_type_name(v));
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // reject values that do not fit (e.g. a negative layer count into an unsigned)
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<T>::max()))
        throw Error(origin + ": field '" + key + "' is out of range: " + v.dump());
    } else {
      const auto s = v.get<int64_t>();
      if (s < int64_t(std::numeric_limits<T>::min()) ||
          (s > 0 && uint64_t(s) > uint64_t(std::numeric_limits<T>::max())))
        throw Error(origin + ": field '" + key + "' is out of range: " + v.dump());
    }
  }
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
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  return detail::convert<T>(*it, key, origin);
}

}  // namespace fp8lm::io
