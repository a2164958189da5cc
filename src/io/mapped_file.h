// A whole file mapped read-only into memory. Pages are read from disk only
// when touched, so mapping a multi-GB checkpoint costs nothing until its bytes
// are used, and the bytes are the page cache's: never a second copy.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>

namespace fp8lm::io {

class MappedFile {
 public:
  // Throws fp8lm::Error "<path>: cannot open file (<reason>)" and the like.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The file's bytes; empty for an empty file. No alignment beyond the page
  // start is implied for anything inside.
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  void unmap() noexcept;

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Drops the whole pages inside `bytes` (part of a read-only mapping) from this
// process's resident memory; they are read from the file again if touched.
// Used after a BF16 weight has been quantized at load, so that only its FP8
// copy counts. A no-op where the system has no such call.
void release_pages(std::span<const std::byte> bytes) noexcept;

}  // namespace fp8lm::io
