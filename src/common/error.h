// The one exception type fp8lm throws for bad input: its message names what
// is wrong (file, tensor, field, parameter) so front-ends can print it as is.
#pragma once

#include <stdexcept>
#include <string>

namespace fp8lm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A backend found no memory left for what a step needed (the device is full,
// not the input bad): the engine fails that step's requests and keeps serving.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& message) : Error(message) {}
};

}  // namespace fp8lm
