#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"

namespace fp8lm::io {
namespace {

// Unique among this process's writers; the pid separates processes and
// O_EXCL catches anything else.
std::filesystem::path temporary_name_for(const std::filesystem::path& destination, int attempt) {
  static std::atomic<unsigned> counter{0};
  const std::string name = "." + destination.filename().string() + "." + std::to_string(::getpid()) + "." +
                           std::to_string(counter++) + "." + std::to_string(attempt) + ".tmp";
  return destination.parent_path() / name;
}

}  // namespace

AtomicFile::AtomicFile(const std::filesystem::path& destination) : destination_(destination) {
  if (destination_.filename().empty()) throw Error(destination_.string() + ": not a file name");
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temporary_ = temporary_name_for(destination_, attempt);
    // open(2) with mode 0666 lets the umask decide permissions, as for any
    // newly created file (mkstemp would force 0600).
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt >= 100)) {
      temporary_.clear();
      fail("cannot create a temporary file beside it");
    }
  }
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : destination_(std::move(other.destination_)),
      temporary_(std::move(other.temporary_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    bytes = bytes.subspan(static_cast<std::size_t>(written));
  }
}

void AtomicFile::finish() {
  if (::fsync(fd_) != 0) fail("fsync failed");
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("close failed");
}

void AtomicFile::commit() {
  if (fd_ >= 0) finish();
  if (std::rename(temporary_.c_str(), destination_.c_str()) != 0) fail("cannot rename the temporary file over it");
  committed_ = true;
}

void AtomicFile::fail(const char* what) const {
  const int err = errno;
  // A full file system may surface as EIO (delayed allocation: the write
  // succeeded into the page cache, the writeback at fsync or close failed) or
  // EDQUOT: the free space tells which, and the user sees the cause.
  std::string cause = std::strerror(err);
  if (err == EIO || err == ENOSPC || err == EDQUOT) {
    const std::filesystem::path dir = destination_.parent_path().empty() ? "." : destination_.parent_path();
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) == 0) {
      const uint64_t free_bytes = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
      cause = describe_write_error(err, free_bytes, dir.string());
    }
  }
  throw Error(destination_.string() + ": " + what + " (" + cause + ")");
}

std::string describe_write_error(int err, uint64_t free_bytes, const std::string& dir) {
  constexpr uint64_t kNearlyFull = 16ull << 20;  // less than this left: the write ran out of space
  const std::string free_text = std::to_string(free_bytes >> 20) + " MiB free on the file system of " + dir;
  if (err == ENOSPC || (err == EIO && free_bytes < kNearlyFull))
    return std::string(std::strerror(ENOSPC)) + ": " + free_text +
           (err == ENOSPC ? std::string() : std::string(" (the system said '") + std::strerror(err) + "')");
  return std::string(std::strerror(err)) + "; " + free_text;
}

}  // namespace fp8lm::io
