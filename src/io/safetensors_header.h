// Parsing and validating the header of a safetensors file, exactly as the
// reference reader (safetensors 0.8.0) does: every file it rejects is rejected
// here with a message naming the file and the tensor, every file it accepts is
// accepted (../shared/docs/fp8-checkpoint-formats.md §1.4). Pure: works on a
// byte span, so the fuzz target and SafetensorsFile share it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace fp8lm::io {

// The reference reader's MAX_HEADER_SIZE.
inline constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // [] is a 0-dim scalar; F4/F6 shapes count elements, not bytes
  // Byte range relative to the start of the data buffer (after the header), end exclusive.
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t byte_size() const { return end - begin; }
  uint64_t element_count() const;  // product of the shape (1 for a scalar)
};

struct SafetensorsHeader {
  uint64_t header_size = 0;  // N, the JSON's length including any padding
  // `__metadata__`: nullopt when the file has none (or has `null`), which
  // transformers treats differently from an empty object.
  std::optional<std::map<std::string, std::string>> metadata;
  std::vector<TensorInfo> tensors;  // sorted by data offset, i.e. in file order

  // File position of the data buffer: 8 + N.
  uint64_t data_start() const { return 8 + header_size; }
};

// Parses the header at the start of `file` (the whole file's bytes; only the
// first 8 + N are read, the size is used to check the offsets) and validates
// it. Throws fp8lm::Error "<origin>: ..." for anything the reference rejects.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& origin);

// A shape as error messages show it: "[4096, 14336]".
std::string shape_text(const std::vector<uint64_t>& shape);

}  // namespace fp8lm::io
