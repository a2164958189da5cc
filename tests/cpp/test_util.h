// Small helpers several C++ test programs share: an FP8 scheme from its two
// defining choices, how a test looks at an fp8lm::Error, and a model directory
// holding only config.json (--load-format dummy).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "common/error.h"
#include "spec/quant_scheme.h"

namespace fp8lm::test {

// An E4M3 scheme with these weight scales and this activation quantization
// (the other fields at their defaults).
inline LinearQuantScheme fp8_scheme(ScaleLayout weight_scales, ActivationQuant activation) {
  LinearQuantScheme s;
  s.quantized = true;
  s.weight_scales = weight_scales;
  s.activation = activation;
  return s;
}

// The message of the fp8lm::Error `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Expects fp8lm::Error whose message contains `what`.
template <typename Fn>
void expect_error(Fn fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// A directory holding only config.json (`config_text`; none when empty),
// removed at the end of the test.
class ConfigDir {
 public:
  explicit ConfigDir(const std::string& config_text) {
    static int counter = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("fp8lm_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
    if (!config_text.empty()) std::ofstream(dir_ / "config.json") << config_text;
  }
  ~ConfigDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ConfigDir(const ConfigDir&) = delete;
  ConfigDir& operator=(const ConfigDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace fp8lm::test
