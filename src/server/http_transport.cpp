#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>

namespace fp8lm::server {

using Clock = std::chrono::steady_clock;

// A connection outside a handler: waiting for a request head, idle between
// requests, or being closed.
struct HttpTransport::Conn {
  enum class Phase { kHead, kIdle, kLinger };
  int fd = -1;
  Phase phase = Phase::kHead;
  Clock::time_point deadline;
  std::string buf;     // bytes received and not yet handled: a partial head, or a pipelined request
  size_t scanned = 0;  // buf[0, scanned) holds no "\r\n\r\n"
  size_t served = 0;   // requests handled on this connection
  size_t lingered = 0;
};

namespace {

// After a refused request the client may still be sending: its bytes are read
// and dropped this long (at most this many) before the close, so that it gets
// the response rather than a reset that discards it.
constexpr auto kLingerTime = std::chrono::milliseconds(2000);
constexpr size_t kLingerBytes = 4 << 20;
constexpr int kListenBacklog = 1024;  // httplib's 5 drops bursts of new connections
constexpr size_t kTrimAfterBodyBytes = 1 << 20;  // a request body this large is trimmed after (serve)

int ms_until(Clock::time_point t) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return int(std::clamp<int64_t>(d, 0, 1000));
}

bool wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int rc;
  do rc = ::poll(&p, 1, timeout_ms);
  while (rc < 0 && errno == EINTR);
  return rc > 0;
}

void close_now(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

const char* reason(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

std::string endpoint_ip(const sockaddr_storage& sa, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    port = ntohs(in.sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(sa);
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    port = ntohs(in6.sin6_port);
  }
  return text;
}

// One request's bytes for httplib: first what the reception thread already
// received (the head, maybe more), then the socket, never reading past what
// httplib asks for (so a pipelined request stays for the next round), within
// the body deadline and a cap on the bytes after the head.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, std::string received, size_t head_len, Clock::time_point read_deadline, size_t max_wire,
             std::chrono::milliseconds write_timeout)
      : fd_(fd),
        buf_(std::move(received)),
        head_len_(head_len),
        deadline_(read_deadline),
        max_wire_(max_wire),
        write_timeout_ms_(int(write_timeout.count())) {}

  bool is_readable() const override { return pos_ < buf_.size() || wait_for(fd_, POLLIN, ms_until(deadline_)); }
  bool is_writable() const override { return wait_for(fd_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (pos_ < buf_.size()) {
      const size_t n = std::min(size, buf_.size() - pos_);
      const size_t body = pos_ + n > head_len_ ? pos_ + n - std::max(pos_, head_len_) : 0;
      if (!count(body)) return -1;
      std::memcpy(ptr, buf_.data() + pos_, n);
      pos_ += n;
      return ssize_t(n);
    }
    size = std::min(size, max_wire_ - wire_);
    if (size == 0) {  // the cap reached
      over_limit_ = true;
      return -1;
    }
    while (true) {
      const ssize_t n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
      if (n >= 0) {
        wire_ += size_t(n);
        return n;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!wait_for(fd_, POLLIN, ms_until(deadline_)) && Clock::now() >= deadline_) {
        timed_out_ = true;
        return -1;
      }
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    while (true) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!wait_for(fd_, POLLOUT, write_timeout_ms_)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { endpoint(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { endpoint(false, ip, port); }
  socket_t socket() const override { return fd_; }

  bool over_limit() const { return over_limit_; }
  bool timed_out() const { return timed_out_; }
  // What was received and not read: the start of a pipelined request.
  std::string unread() const { return buf_.substr(pos_); }

 private:
  // Counts n more body bytes; false (and over_limit) past the cap.
  bool count(size_t n) {
    if (n > max_wire_ - wire_) {
      over_limit_ = true;
      return false;
    }
    wire_ += n;
    return true;
  }

  void endpoint(bool peer, std::string& ip, int& port) const {
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    const int rc = peer ? getpeername(fd_, reinterpret_cast<sockaddr*>(&sa), &len)
                        : getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port = 0;
    ip = rc == 0 ? endpoint_ip(sa, port) : std::string();
  }

  int fd_;
  std::string buf_;
  size_t pos_ = 0;
  size_t head_len_;
  Clock::time_point deadline_;
  size_t max_wire_;
  size_t wire_ = 0;  // body bytes read, from the buffer or the socket
  int write_timeout_ms_;
  bool over_limit_ = false, timed_out_ = false;
};

// What the transport learns about the request its handler thread is serving.
struct Exchange {
  int fd = -1;
  ConnStream* stream = nullptr;
  bool routed = false;    // its head passed httplib's parsing (the pre-routing stage ran)
  bool has_body = false;  // Content-Length > 0 or chunked
  bool body_read = false;
  bool must_close = false;
  size_t body_bytes = 0;  // counted in HttpTransport::bodies_bytes_ until the request ends
};

thread_local Exchange* current = nullptr;

bool ieq(std::string_view a, std::string_view b) {
  const auto same = [](char x, char y) { return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y)); };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), same);
}

}  // namespace

HttpTransport::HttpTransport(TransportLimits limits, ErrorBody error_body)
    : limits_(limits), error_body_(std::move(error_body)) {
  // glibc raises its mmap threshold to the largest block freed (up to 32 MiB)
  // and its trim threshold to twice that, so after one large request the next
  // ones' multi-MiB strings come from the handler threads' arenas and stay
  // there, free but resident (measured: +28 MiB per arena and 30 MB /tokenize).
  // Fixed thresholds keep large blocks mmapped (returned when freed) and the
  // arenas' free tops trimmed; TrimAfter (serve) returns the rest.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
  set_payload_max_length(limits_.max_body_bytes);
  set_keep_alive_max_count(limits_.max_requests_per_connection);  // for the Keep-Alive header httplib writes
  set_keep_alive_timeout(std::max<time_t>(1, time_t(limits_.keep_alive_timeout.count() / 1000)));
  set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const HandlerResponse r = check_head(req, res);
    if (r == HandlerResponse::Handled || !filter_) return r;
    if (filter_(req, res) == HandlerResponse::Unhandled) return HandlerResponse::Unhandled;
    // Answered before its body was read: the body must not be taken for the next request.
    if (current != nullptr && current->has_body) {
      current->must_close = true;
      res.set_header("Connection", "close");
    }
    return HandlerResponse::Handled;
  });
  // A client that waits for 100 Continue before sending its body gets the
  // refusal instead (and sends no body), when the head already settles it.
  set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (check_head(req, res) == HandlerResponse::Unhandled) return 100;
    // httplib writes this response as it is, without computing its length.
    res.set_header("Content-Length", std::to_string(res.body.size()));
    return res.status;
  });
}

HttpTransport::~HttpTransport() {
  stop();
  if (svr_sock_ != INVALID_SOCKET) ::close(svr_sock_.exchange(INVALID_SOCKET));
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void HttpTransport::set_request_filter(HandlerWithResponse filter) { filter_ = std::move(filter); }

int HttpTransport::bind(const std::string& host, int port) {
  if (port == 0) {
    port = bind_to_any_port(host);
    if (port < 0) return -1;
  } else if (!bind_to_port(host, port)) {
    return -1;
  }
  ::listen(svr_sock_, kListenBacklog);
  ::fcntl(svr_sock_, F_SETFL, ::fcntl(svr_sock_, F_GETFL) | O_NONBLOCK);
  return port;
}

// The framing of a request, checked from its head before any body byte is read.
HttpTransport::HandlerResponse HttpTransport::check_head(const httplib::Request& req, httplib::Response& res) {
  Exchange* ex = current;
  if (ex == nullptr) return HandlerResponse::Unhandled;
  ex->routed = true;
  const auto refuse = [&](int status, const std::string& message) {
    res.status = status;
    res.set_content(error_body_(status, message), "application/json");
    res.set_header("Connection", "close");
    ex->must_close = true;
    return HandlerResponse::Handled;
  };
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t encodings = req.get_header_value_count("Transfer-Encoding");
  const std::string te = req.get_header_value("Transfer-Encoding");
  const bool chunked = encodings == 1 && ieq(te, "chunked");
  if (encodings > 0 && !chunked)
    return refuse(501, "Transfer-Encoding: " + te + (encodings > 1 ? " (and more)" : "") +
                           " is not supported; send the body with Content-Length or Transfer-Encoding: chunked");
  if (chunked && lengths > 0)
    return refuse(400, "a request has Content-Length or Transfer-Encoding: chunked, not both");
  if (lengths > 1) return refuse(400, "a request has one Content-Length header, not " + std::to_string(lengths));
  uint64_t length = 0;
  if (lengths == 1) {
    const std::string v = req.get_header_value("Content-Length");
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      return refuse(400, "Content-Length: '" + v + "' is not a number of bytes");
  }
  ex->has_body = chunked || length > 0;
  const std::string limit = std::to_string(limits_.max_body_bytes >> 20) + " MiB";
  if (length > limits_.max_body_bytes)
    return refuse(413, "the request body (" + std::to_string(length) + " bytes) is larger than the limit of " + limit);
  if (ex->has_body) {
    const std::string ce = req.get_header_value("Content-Encoding");
    if (req.get_header_value_count("Content-Encoding") > 1 ||
        !(ce.empty() || ieq(ce, "identity") || ieq(ce, "gzip") || ieq(ce, "deflate") || ieq(ce, "br")))
      return refuse(415, "Content-Encoding: " + ce + " is not supported (gzip, deflate, br or none)");
  }
  const bool needs_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
  if (needs_body && lengths == 0 && !chunked)
    return refuse(411, "a " + req.method + " request needs Content-Length (or Transfer-Encoding: chunked)");
  return HandlerResponse::Unhandled;
}

bool HttpTransport::read_body(const httplib::ContentReader& reader, std::string& body, httplib::Response& res) {
  bool too_large = false, over_budget = false;
  Exchange* ex = current;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > limits_.max_body_bytes) {
      too_large = true;
      return false;  // stops reading, and decompressing, here
    }
    // Every request's body counts against one budget until the request ends,
    // so that many large bodies at once cannot exhaust the memory.
    if (bodies_bytes_.fetch_add(n) + n > limits_.max_bodies_bytes) {
      bodies_bytes_ -= n;
      over_budget = true;
      return false;
    }
    if (ex != nullptr) ex->body_bytes += n;
    else bodies_bytes_ -= n;
    body.append(data, n);
    return true;
  });
  if (ok) {
    if (ex != nullptr) ex->body_read = true;
    return true;
  }
  body.clear();
  int status = 400;
  std::string message = "the request body could not be read (malformed chunked encoding or compressed data, or the "
                        "connection closed)";
  if (over_budget) {
    status = 503;
    message = "the server is receiving too many large request bodies at once (" +
              std::to_string(limits_.max_bodies_bytes >> 20) + " MiB together); retry later";
  } else if (too_large || (ex != nullptr && ex->stream->over_limit())) {
    status = 413;
    message = "the request body is larger than the limit of " + std::to_string(limits_.max_body_bytes >> 20) +
              " MiB (after decompression)";
  } else if (ex != nullptr && ex->stream->timed_out()) {
    status = 408;
    message = "the request body did not arrive within " + std::to_string(limits_.body_timeout.count() / 1000) +
              " s (--body-timeout)";
  }
  if (ex != nullptr) ex->must_close = true;
  res.status = status;
  res.set_content(error_body_(status, message), "application/json");
  res.set_header("Connection", "close");
  return false;
}

bool HttpTransport::client_gone() {
  if (current == nullptr) return false;
  char byte = 0;
  const ssize_t n = ::recv(current->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // orderly shutdown: the client closed
  return n < 0 && (errno == ECONNRESET || errno == EPIPE);  // reset; else bytes waiting (pipelined) or none yet
}

void HttpTransport::start() {
  // Other methods with a body, to paths without a route: answered without reading the body.
  const auto not_found = [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader&) {
    res.status = 404;
    res.set_content(error_body_(404, "Not found: " + req.method + " " + req.path), "application/json");
    if (current != nullptr && current->has_body) {
      current->must_close = true;
      res.set_header("Connection", "close");
    }
  };
  Post(".*", not_found);
  Put(".*", not_found);
  Patch(".*", not_found);
  Delete(".*", not_found);
  pool_ = std::make_unique<httplib::ThreadPool>(limits_.handler_threads);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  reception_ = std::thread([this] { reception(); });
}

void HttpTransport::drain() { draining_ = true; }

void HttpTransport::wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

void HttpTransport::stop() {
  {
    std::lock_guard lock(m_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake();
  if (reception_.joinable()) reception_.join();
  // Requests being handled (and connections already handed over) finish; the
  // listening socket stays valid meanwhile, as httplib's stream writer stops
  // writing once it is gone.
  if (pool_) pool_->shutdown();
  pool_.reset();
}

void HttpTransport::give_back(Conn conn) {
  {
    std::lock_guard lock(m_);
    if (!stopping_) {
      returned_.push_back(std::move(conn));
      conn.fd = -1;
    }
  }
  if (conn.fd >= 0) close_now(conn.fd);
  else wake();
}

void HttpTransport::serve(Conn conn, size_t head_len) {
  // A large body leaves its memory (the wire bytes, the text, its parse, what
  // the handler built from it) free but held in the malloc arenas; it goes back
  // to the system when this request is done (after every buffer of it is gone,
  // so declared first), so that the server's memory returns to its baseline
  // after a burst of large requests. Small requests, the common case, pay nothing.
  struct TrimAfter {
    size_t body_bytes = 0;
    ~TrimAfter() {
      if (body_bytes >= kTrimAfterBodyBytes) malloc_trim(0);
    }
  } trim;
  const size_t max_wire = limits_.max_body_bytes + limits_.max_body_bytes / 16;
  ConnStream strm(conn.fd, std::move(conn.buf), head_len, Clock::now() + limits_.body_timeout, max_wire,
                  limits_.write_timeout);
  Exchange ex;
  ex.fd = conn.fd;
  ex.stream = &strm;
  const bool close_after = draining_ || ++conn.served >= limits_.max_requests_per_connection;
  bool connection_closed = false;
  current = &ex;
  const bool ok = process_request(strm, close_after, connection_closed, nullptr);
  current = nullptr;
  bodies_bytes_ -= ex.body_bytes;
  trim.body_bytes = ex.body_bytes;
  if (!ok || close_after || connection_closed || !ex.routed || ex.must_close || (ex.has_body && !ex.body_read)) {
    // Unread bytes may follow (a refused body): linger so the client reads the response.
    if (!ok) {
      close_now(conn.fd);
      return;
    }
    ::shutdown(conn.fd, SHUT_WR);
    conn.phase = Conn::Phase::kLinger;
    conn.deadline = Clock::now() + kLingerTime;
    conn.buf.clear();
    give_back(std::move(conn));
    return;
  }
  conn.buf = strm.unread();
  conn.scanned = 0;
  conn.phase = conn.buf.empty() ? Conn::Phase::kIdle : Conn::Phase::kHead;
  conn.deadline = Clock::now() + (conn.buf.empty() ? limits_.keep_alive_timeout : limits_.header_timeout);
  give_back(std::move(conn));
}

void HttpTransport::reception() {
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  std::vector<char> buf(std::max<size_t>(limits_.max_head_bytes, 64 << 10));
  Clock::time_point accept_paused_until;

  // A response written by this thread (the head never reached a handler), then a lingering close.
  const auto refuse = [&](Conn& c, int status, const std::string& message) {
    const std::string body = error_body_(status, message);
    const std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                            "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\nConnection: close\r\n\r\n" + body;
    (void)!::send(c.fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);  // fits: nothing else is queued
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Conn::Phase::kLinger;
    c.deadline = Clock::now() + kLingerTime;
    c.buf.clear();
  };
  // True when c holds a complete head: it is then handed to a handler thread.
  const auto hand_over_if_complete = [&](Conn& c) {
    const size_t from = c.scanned >= 3 ? c.scanned - 3 : 0;
    const size_t at = c.buf.find("\r\n\r\n", from);
    // A line of the head ended by a bare LF: refused at once (RFC 9112 lets a
    // server reject it), rather than waiting for a CRLF CRLF that never comes.
    const size_t head_end = at == std::string::npos ? c.buf.size() : at + 4;
    for (size_t i = c.scanned; i < head_end; ++i)
      if (c.buf[i] == '\n' && (i == 0 || c.buf[i - 1] != '\r')) {
        refuse(c, 400, "the request head has a line ended by a bare LF: HTTP/1.1 ends each line with CRLF");
        return false;
      }
    if (at == std::string::npos) {
      c.scanned = c.buf.size();
      if (c.buf.size() >= limits_.max_head_bytes)
        refuse(c, 431, "the request head (request line and headers) is larger than " +
                           std::to_string(limits_.max_head_bytes >> 10) + " KiB");
      return false;
    }
    const size_t head_len = at + 4;
    pool_->enqueue([this, c = std::move(c), head_len]() mutable { serve(std::move(c), head_len); });
    return true;
  };

  while (true) {
    {
      std::lock_guard lock(m_);
      if (stopping_) break;
      for (Conn& c : returned_) conns.push_back(std::move(c));
      returned_.clear();
    }
    // A kept-alive connection may come back holding the next (pipelined) request.
    std::erase_if(conns, [&](Conn& c) { return c.phase == Conn::Phase::kHead && c.scanned == 0 && !c.buf.empty() &&
                                               hand_over_if_complete(c); });
    const auto now = Clock::now();
    std::erase_if(conns, [&](Conn& c) {
      if (now < c.deadline) return false;
      if (c.phase == Conn::Phase::kHead && !c.buf.empty()) {  // a connection that sent nothing just closes
        refuse(c, 408, "the request head did not arrive within " +
                           std::to_string(limits_.header_timeout.count() / 1000) + " s (--header-timeout)");
        return false;
      }
      close_now(c.fd);  // idle past the keep-alive timeout, or done lingering
      return true;
    });

    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back({accepting ? int(svr_sock_) : -1, POLLIN, 0});
    Clock::time_point next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until);
    for (const Conn& c : conns) {
      fds.push_back({c.fd, POLLIN, 0});
      next = std::min(next, c.deadline);
    }
    int rc = ::poll(fds.data(), fds.size(), ms_until(next));
    if (rc < 0) continue;  // EINTR
    if (fds[0].revents) {
      uint64_t n;
      (void)!::read(wake_fd_, &n, sizeof n);
    }
    if (fds[1].revents) {
      for (int i = 0; i < 64; ++i) {  // a burst, a bounded amount at a time
        const int fd = ::accept4(svr_sock_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: the clients wait in the backlog while deadlines free some.
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
          break;
        }
        Conn c;
        c.fd = fd;
        c.deadline = Clock::now() + limits_.header_timeout;
        if (fd >= FD_SETSIZE) {
          // httplib 0.11 answers 500 to a socket it cannot select() on.
          refuse(c, 503, "too many open connections; retry later");
        } else {
          const int on = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        }
        conns.push_back(std::move(c));
      }
    }
    // New connections were appended after the polled ones: only the first fds.size() - 2 have revents.
    const size_t polled = fds.size() - 2;
    std::vector<Conn> keep;
    keep.reserve(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      if (i >= polled || fds[i + 2].revents == 0) {
        keep.push_back(std::move(c));
        continue;
      }
      if (c.phase == Conn::Phase::kLinger) {
        const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n > 0) c.lingered += size_t(n);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || c.lingered > kLingerBytes) {
          ::close(c.fd);
          continue;
        }
        keep.push_back(std::move(c));
        continue;
      }
      const size_t room = limits_.max_head_bytes - std::min(limits_.max_head_bytes, c.buf.size());
      const ssize_t n = ::recv(c.fd, buf.data(), std::max<size_t>(room, 1), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_now(c.fd);  // the client left
        continue;
      }
      if (n > 0) {
        if (c.phase == Conn::Phase::kIdle) {
          c.phase = Conn::Phase::kHead;
          c.deadline = Clock::now() + limits_.header_timeout;
        }
        c.buf.append(buf.data(), size_t(n));
        if (hand_over_if_complete(c)) continue;
      }
      keep.push_back(std::move(c));
    }
    conns.swap(keep);
  }

  // Stopping: no new connections (the socket stays open, but no longer
  // listens, until the handlers are done), none waiting for a request.
  ::shutdown(svr_sock_, SHUT_RDWR);
  for (Conn& c : conns) close_now(c.fd);
}

}  // namespace fp8lm::server
