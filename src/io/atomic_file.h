// A file written under a temporary name beside its destination and renamed
// over it only on commit(): readers see the old file or the complete new one,
// never a partial one. Destroyed without commit(), it removes its temporary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace fp8lm::io {

class AtomicFile {
 public:
  // Creates the temporary file; throws fp8lm::Error naming `destination`.
  explicit AtomicFile(const std::filesystem::path& destination);
  ~AtomicFile();
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  AtomicFile& operator=(AtomicFile&&) = delete;

  void write(std::span<const std::byte> bytes);
  // Flushes to disk and closes; after this only commit() is allowed.
  void finish();
  // Renames the finished temporary over the destination.
  void commit();

  const std::filesystem::path& destination() const { return destination_; }

 private:
  [[noreturn]] void fail(const char* what) const;

  std::filesystem::path destination_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// What a failed write reports for errno `err` with `free_bytes` left on the file
// system of `dir`: a full one is named "No space left on device" with what is
// free, whichever of ENOSPC or EIO (delayed allocation) the system gave.
std::string describe_write_error(int err, uint64_t free_bytes, const std::string& dir);

}  // namespace fp8lm::io
