#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"

namespace fp8lm::io {
namespace {

std::string system_error_text() { return std::strerror(errno); }

// Closes the descriptor on every path out of the constructor: the mapping
// keeps its own reference to the file.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) {
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw Error(path.string() + ": cannot open file (" + system_error_text() + ")");
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw Error(path.string() + ": cannot stat file (" + system_error_text() + ")");
  if (!S_ISREG(info.st_mode)) throw Error(path.string() + ": not a regular file");
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ == 0) return;  // mmap refuses length 0; an empty span says it all
  // MAP_PRIVATE: if the file is changed under us, our view is not written
  // back, and nothing we do can change the file.
  void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (address == MAP_FAILED) {
    size_ = 0;
    throw Error(path.string() + ": cannot map file (" + system_error_text() + ")");
  }
  data_ = static_cast<const std::byte*>(address);
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void release_pages(std::span<const std::byte> bytes) noexcept {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  if (bytes.empty() || page == 0) return;
  const auto begin = (uintptr_t(bytes.data()) + page - 1) / page * page;
  const auto end = (uintptr_t(bytes.data()) + bytes.size()) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace fp8lm::io
