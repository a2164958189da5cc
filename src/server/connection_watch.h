// Whether the client of a request that is still being computed has gone away.
//
// A streaming response notices a departed client when a write fails; a
// non-streaming one writes nothing until the answer is ready, and cpp-httplib
// 0.11 (Debian's) gives its handlers no way to ask about the connection. So
// the connection's socket is found by its two endpoints — a TCP connection is
// unique by (local address, local port, remote address, remote port) — among
// the process's descriptors, and then peeked without blocking: a read of 0
// bytes means the client shut its side (closed or killed).
//
// Valid only on the handler's own thread while the handler runs: the
// connection, and so its descriptor, stays open exactly that long.
#pragma once

#include <string>

namespace fp8lm::server {

class ConnectionWatch {
 public:
  ConnectionWatch(std::string local_addr, int local_port, std::string remote_addr, int remote_port);

  // True once the peer has closed its side. False while it is open, and when
  // the socket cannot be found (then nothing is known; never a false alarm).
  bool peer_closed();

 private:
  std::string local_addr_, remote_addr_;
  int local_port_, remote_port_;
  int fd_ = -1;         // found on first use
  bool searched_ = false;
};

}  // namespace fp8lm::server
