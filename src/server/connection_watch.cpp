#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <system_error>
#include <utility>

namespace fp8lm::server {
namespace {

// A socket address as httplib writes it (inet_ntop's form) and its port; false for non-IP sockets.
bool endpoint(const sockaddr_storage& sa, std::string& addr, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    if (inet_ntop(AF_INET, &in.sin_addr, text, sizeof text) == nullptr) return false;
    port = ntohs(in.sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(sa);
    if (inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text) == nullptr) return false;
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  addr = text;
  return true;
}

bool is_endpoint(int fd, bool peer, const std::string& want_addr, int want_port) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  std::string addr;
  int port = -1;
  return rc == 0 && endpoint(sa, addr, port) && port == want_port && addr == want_addr;
}

}  // namespace

ConnectionWatch::ConnectionWatch(std::string local_addr, int local_port, std::string remote_addr, int remote_port)
    : local_addr_(std::move(local_addr)),
      remote_addr_(std::move(remote_addr)),
      local_port_(local_port),
      remote_port_(remote_port) {}

bool ConnectionWatch::peer_closed() {
  if (!searched_) {
    searched_ = true;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      int fd = -1;
      if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
      if (is_endpoint(fd, true, remote_addr_, remote_port_) && is_endpoint(fd, false, local_addr_, local_port_)) {
        fd_ = fd;
        break;
      }
    }
  }
  if (fd_ < 0) return false;
  char byte = 0;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;                                  // orderly shutdown: the client closed
  if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return true;  // reset
  return false;                                             // bytes waiting (a pipelined request) or none yet
}

}  // namespace fp8lm::server
