// Helpers for the tests of config.json / quantization_config parsing: the
// committed tiny checkpoints (tools/make_checkpoint_fixtures.py) and the real
// Hugging Face configs beside the repository (../shared/data/hf).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/json_file.h"
#include "spec/quant_scheme.h"

namespace fp8lm::test {

inline std::filesystem::path checkpoint_fixture(const std::string& name) {
  return std::filesystem::path(FP8LM_FIXTURE_DIR) / "checkpoints" / name;
}

inline std::vector<std::string> checkpoint_fixture_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(FP8LM_FIXTURE_DIR) / "checkpoints"))
    if (e.is_directory() && std::filesystem::exists(e.path() / "expected.json")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// A config.json from ../shared/data/hf/<repo>, or nullopt when that folder is absent.
inline std::optional<std::filesystem::path> shared_hf_config(const std::string& repo,
                                                             const std::string& file = "config.json") {
  const std::filesystem::path p = std::filesystem::path(FP8LM_SHARED_HF_DIR) / repo / file;
  if (!std::filesystem::exists(p)) return std::nullopt;
  return p;
}

// Runs `f`, expects an fp8lm::Error whose message contains every string in `parts`.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

inline ActivationQuant activation_from(const std::string& s) {
  if (s == "none") return ActivationQuant::kNone;
  if (s == "dynamic-tensor") return ActivationQuant::kDynamicTensor;
  if (s == "dynamic-token") return ActivationQuant::kDynamicToken;
  if (s == "dynamic-group") return ActivationQuant::kDynamicGroup;
  if (s == "static-tensor") return ActivationQuant::kStaticTensor;
  throw std::runtime_error("unknown activation in expected.json: " + s);
}

// expected.json's per-module scheme (written in fp8lm's terms by the fixture maker).
inline LinearQuantScheme scheme_from(const nlohmann::json& j) {
  LinearQuantScheme s;
  if (!j.at("quantized").get<bool>()) return s;
  s.quantized = true;
  s.weight_format = j.at("weight_format") == "e4m3" ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  const std::string g = j.at("weight_scales");
  const int64_t rows = j.at("group_rows"), cols = j.at("group_cols");
  if (g == "tensor") s.weight_scales = ScaleLayout::tensor();
  else if (g == "channel") s.weight_scales = ScaleLayout::channel();
  else if (g == "block") s.weight_scales = ScaleLayout::block(rows, cols);
  else if (g == "group") s.weight_scales = ScaleLayout::group(cols);
  else throw std::runtime_error("unknown weight_scales in expected.json: " + g);
  s.weights_serialized = j.at("weights_serialized");
  s.weight_scale_suffix = j.at("weight_scale_suffix");
  s.activation = activation_from(j.at("activation"));
  s.activation_group = j.at("activation_group");
  s.input_scale_suffix = j.at("input_scale_suffix");
  s.activation_scale_upper_bound = j.at("activation_scale_upper_bound").get<float>();
  return s;
}

// Every field of a scheme, for comparisons with readable failures.
// (LinearQuantScheme's defaulted operator== is unusable while ScaleLayout has none.)
inline std::string fields(const ScaleLayout& l) {
  return std::string(name(l.granularity)) + "(" + std::to_string(l.group_rows) + "x" + std::to_string(l.group_cols) + ")";
}
inline std::string fields(const LinearQuantScheme& s) {
  if (!s.quantized) return "unquantized";
  return std::string(name(s.weight_format)) + " w:" + fields(s.weight_scales) + (s.weights_serialized ? "" : " online") +
         " " + s.weight_scale_suffix + " a:" + std::string(name(s.activation)) + "/" + std::to_string(s.activation_group) +
         " " + s.input_scale_suffix + " ub:" + std::to_string(s.activation_scale_upper_bound);
}

}  // namespace fp8lm::test
