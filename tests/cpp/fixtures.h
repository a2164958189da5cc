// Loading the committed reference fixtures (tools/make_*_fixtures.py).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/cast.h"
#include "numerics/fp8_format.h"
#include "numerics/quantize.h"

namespace fp8lm::test {

inline std::string fixture_path(const std::string& rel) { return std::string(FP8LM_FIXTURE_DIR) + "/" + rel; }

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open fixture " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A fixture array as elements of T (little-endian host assumed, as on x86/arm).
template <typename T>
std::vector<T> read_array(const std::string& dir, const std::string& name) {
  const std::vector<uint8_t> bytes = read_bytes(fixture_path(dir + "/" + name));
  if (bytes.size() % sizeof(T) != 0) throw std::runtime_error("fixture " + name + " has a partial element");
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

inline nlohmann::json read_manifest(const std::string& dir) {
  const std::vector<uint8_t> bytes = read_bytes(fixture_path(dir + "/manifest.json"));
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

inline Fp8Format parse_format(const std::string& s) {
  if (s == "e4m3") return Fp8Format::kE4M3;
  if (s == "e5m2") return Fp8Format::kE5M2;
  throw std::runtime_error("unknown format in fixture: " + s);
}

inline Saturation parse_saturation(const std::string& s) {
  if (s == "sat_finite") return Saturation::kSatFinite;
  if (s == "torch_cast") return Saturation::kTorchCast;
  throw std::runtime_error("unknown saturation in fixture: " + s);
}

inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Every kernel choice this CPU can run (scalar always).
inline std::vector<KernelChoice> usable_kernel_choices() {
  std::vector<KernelChoice> out;
  for (std::string_view name : usable_kernel_names()) {
    if (name == "scalar") out.push_back(KernelChoice::kScalar);
    if (name == "avx2") out.push_back(KernelChoice::kAvx2);
    if (name == "avx512") out.push_back(KernelChoice::kAvx512);
  }
  return out;
}

inline const char* kernel_name(KernelChoice k) {
  switch (k) {
    case KernelChoice::kScalar: return "scalar";
    case KernelChoice::kAvx2: return "avx2";
    case KernelChoice::kAvx512: return "avx512";
    case KernelChoice::kAuto: return "auto";
  }
  return "?";
}

}  // namespace fp8lm::test
