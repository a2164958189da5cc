// Small helpers several C++ test programs share: an FP8 scheme from its two
// defining choices, and how a test looks at an fp8lm::Error.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace fp8lm::test
