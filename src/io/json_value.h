// The one set of JSON value checks every reader of JSON uses: checkpoint files
// (io/json_file.h), tokenizer.json (tokenizer/json_util.h) and the server's
// request bodies (server/api.cpp). Each reader words its own errors — a file
// and field, a JSON path, an HTTP 400 naming the parameter — but whether a
// value is "given", whether it holds a C++ type, whether it fits, and how its
// type is named come from here, so the three cannot drift apart.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace fp8lm::io {

// The member `key` of `object` when it is given: nullptr when `object` is not an
// object, when the key is absent, or when its value is null (OpenAI clients and
// Hugging Face configs both write null for "not set"). Json is nlohmann::json or
// nlohmann::ordered_json (the server keeps the client's key order).
template <class Json>
const Json* json_given(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// True when `v` has the JSON type of T (integers for integral T, any number for
// floating T); says nothing about range — see json_fits.
template <typename T>
bool json_holds(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  else if constexpr (std::is_integral_v<T>) return v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) return v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  else if constexpr (std::is_same_v<T, nlohmann::json>) return true;
  else return false;
}

// For an integral T and a value that json_holds<T>: true when it is within T's
// range (a negative count into an unsigned, 2^40 into int32 are not).
template <typename T>
bool json_fits(const nlohmann::json& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
    const auto s = v.get<int64_t>();
    return s >= int64_t(std::numeric_limits<T>::min()) &&
           (s <= 0 || uint64_t(s) <= uint64_t(std::numeric_limits<T>::max()));
  } else {
    return true;
  }
}

// What T is called in "must be <name>": "an integer", "a string", ...
template <typename T>
const char* json_expected_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else return "a JSON value";
}

// The type of a value as the same words ("an integer", "a number", "an array",
// "null"), for messages that read "must be X, not Y".
template <class Json>
std::string json_kind_name(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// A non-negative integer value within [0, max]: a token id, a size.
inline bool json_is_count(const nlohmann::json& v, int64_t max = std::numeric_limits<int64_t>::max()) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(max);
  return v.get<int64_t>() >= 0 && v.get<int64_t>() <= max;
}

}  // namespace fp8lm::io
