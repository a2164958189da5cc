// libFuzzer target: the safetensors header parser and the JSON reader of
// config files. Any input must end in a result or an fp8lm::Error; a crash,
// a sanitizer report, a hang or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "io/json_file.h"
#include "io/safetensors_header.h"

namespace {

// Every range the parser accepts must lie inside the file: read both ends
// (AddressSanitizer flags anything outside the input buffer).
void touch_tensors(const fp8lm::io::SafetensorsHeader& header, std::span<const std::byte> file) {
  volatile std::byte sink{};
  for (const auto& tensor : header.tensors) {
    if (tensor.byte_size() == 0) continue;
    sink = file[header.data_start() + tensor.begin];
    sink = file[header.data_start() + tensor.end - 1];
  }
  static_cast<void>(sink);
}

void parse_as_file(std::span<const std::byte> file) {
  try {
    touch_tensors(fp8lm::io::parse_safetensors_header(file, "fuzz"), file);
  } catch (const fp8lm::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);

  // 1. The input as a whole safetensors file.
  parse_as_file(input);

  // 2. The input as the header JSON of a file with no tensor data, so that
  //    mutations reach the JSON and field rules rather than the length check.
  std::vector<std::byte> file(8 + size);
  for (std::size_t i = 0; i < 8; ++i) file[i] = std::byte(static_cast<uint8_t>(uint64_t(size) >> (8 * i)));
  if (size > 0) std::memcpy(file.data() + 8, data, size);
  parse_as_file(file);

  // 3. The input as a config file (config.json, index files).
  try {
    fp8lm::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
