// The HTTP/1.1 transport under `fp8lm serve`: cpp-httplib 0.11 (Debian's)
// parses requests, routes them and writes responses, but the connections are
// owned here, because httplib's own loop gives every connection a handler
// thread for as long as it is open and bounds reads only per recv().
//
// One reception thread polls the listening socket and every connection that
// has not yet sent a complete request head (request line and headers): it
// reads what arrives, answers 408 and closes a connection whose head is not
// complete within header_timeout (431 past max_head_bytes), and only then hands
// the connection to a handler thread. A handler reads the body under
// body_timeout, runs httplib's process_request, and gives a kept-alive
// connection back to the reception thread, which closes it after
// keep_alive_timeout idle. So slow or idle clients hold no handler thread,
// except while their body is read.
//
// Bodies: at most max_body_bytes after decompression, read by the routes
// through read_body(); framing is checked before any body byte is read (411
// without a length, 501 for a Transfer-Encoding other than chunked, 400 for
// contradicting lengths, 413 for a Content-Length over the limit, 415 for an
// unknown Content-Encoding). Whenever a body is refused or left unread the
// response says Connection: close and the connection is closed (after a short
// lingering read, so the client sees the response rather than a reset): the
// unread bytes must never be parsed as the next request.
//
// Every POST/PUT/PATCH/DELETE route must take a ContentReader (register them
// before start()); requests to other paths with those methods are answered 404
// without their body being read.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fp8lm::server {

struct TransportLimits {
  // A request's head must arrive within this of the connection opening, or of
  // its first byte on a kept-alive connection.
  std::chrono::milliseconds header_timeout{20'000};
  // Its body within this of the head (the whole body, not each read).
  std::chrono::milliseconds body_timeout{60'000};
  // A kept-alive connection with no request for this long is closed.
  std::chrono::milliseconds keep_alive_timeout{5'000};
  // A write making no progress this long fails: the client stopped reading.
  std::chrono::milliseconds write_timeout{5'000};
  // The request line and headers together.
  size_t max_head_bytes = 64 << 10;
  // A request body after decompression (the wire bytes, chunk framing
  // included, may exceed it by a sixteenth).
  size_t max_body_bytes = 64 << 20;
  // All bodies being read or handled at once: past it a body is refused with
  // 503 (the handler threads × max_body_bytes could otherwise fill the memory).
  size_t max_bodies_bytes = size_t(1) << 30;
  // Requests handled at once (streams and waiting non-streaming requests hold one each).
  size_t handler_threads = 64;
  // Requests on one kept-alive connection before it is closed.
  size_t max_requests_per_connection = 1000;
};

class HttpTransport : public httplib::Server {
 public:
  // An error response's body (the API's error JSON) for a status and message.
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;

  HttpTransport(TransportLimits limits, ErrorBody error_body);
  ~HttpTransport() override;

  // Binds and listens on host:port (0: any free port); returns the port, or -1.
  int bind(const std::string& host, int port);
  // Starts the reception and handler threads (after the routes are registered).
  void start();
  // From now on every response says Connection: close (a graceful shutdown).
  void drain();
  // Stops accepting, closes the connections waiting for a request, lets every
  // request being handled finish, and joins the threads. Idempotent.
  void stop();

  // Runs after the transport's own checks of a request's head, before its
  // route (as httplib's pre-routing handler, which the transport uses itself).
  void set_request_filter(HandlerWithResponse filter);

  // ---- for route handlers, on their own thread ---------------------------------
  // Reads the request's body through `reader` into `body`, decompressed and
  // within the limits. On failure `res` holds the error (413, 408 or 400), the
  // connection closes after the response, and false is returned.
  bool read_body(const httplib::ContentReader& reader, std::string& body, httplib::Response& res);
  // Whether the client of the request this thread handles has closed its
  // connection (false off a handler thread, or when nothing is known).
  static bool client_gone();

  const TransportLimits& limits() const { return limits_; }

 private:
  struct Conn;
  void reception();
  void serve(Conn conn, size_t head_len);
  void give_back(Conn conn);
  void wake();
  HandlerResponse check_head(const httplib::Request& req, httplib::Response& res);

  TransportLimits limits_;
  ErrorBody error_body_;
  HandlerWithResponse filter_;
  std::unique_ptr<httplib::ThreadPool> pool_;
  std::thread reception_;
  int wake_fd_ = -1;  // an eventfd: the reception thread's poll wakes on it
  std::atomic<bool> draining_{false};
  std::atomic<size_t> bodies_bytes_{0};  // bytes of the bodies of the requests being handled
  std::mutex m_;
  bool stopping_ = false;              // guarded by m_
  std::vector<Conn> returned_;         // guarded by m_: kept-alive connections back from handlers
};

}  // namespace fp8lm::server
