// One safetensors file, memory-mapped: opening it reads and validates the
// header only; a tensor's bytes are read from disk when the caller touches
// them, straight from the mapping (no copy).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/dtype.h"
#include "io/mapped_file.h"
#include "io/safetensors_header.h"

namespace fp8lm::io {

class SafetensorsFile {
 public:
  // Maps the file and validates its header (safetensors_header.h); throws
  // fp8lm::Error naming the file (and the tensor) for anything invalid.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }

  // `__metadata__`, or nullopt when the file has none.
  const std::optional<std::map<std::string, std::string>>& metadata() const { return header_.metadata; }

  // Every tensor, in file (data offset) order.
  std::span<const TensorInfo> tensors() const { return header_.tensors; }

  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // Throws fp8lm::Error "<path>: no tensor named '<name>'".
  const TensorInfo& tensor(std::string_view name) const;

  // The tensor's bytes inside the mapping: little-endian, row-major. Foreign
  // files give no alignment guarantee, so read multi-byte elements with
  // memcpy (or check the address) rather than casting the pointer.
  std::span<const std::byte> bytes(const TensorInfo& tensor) const;
  std::span<const std::byte> bytes(std::string_view name) const { return bytes(tensor(name)); }

  // File position of the first data byte (8 + header length).
  uint64_t data_start() const { return header_.data_start(); }

 private:
  std::filesystem::path path_;
  MappedFile mapping_;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_by_name_;
};

}  // namespace fp8lm::io
