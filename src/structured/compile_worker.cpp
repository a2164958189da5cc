#include "structured/compile_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>

#include "common/error.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_vocabulary.h"
#include "tokenizer/tokenizer.h"

extern char** environ;

namespace fp8lm::structured {

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += char((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void put_string(std::string& out, const std::string& s) {
  if (s.size() > kMaxSpecFrame) throw Error("structured outputs: the constraint is larger than 64 MiB");
  put_u32(out, uint32_t(s.size()));
  out += s;
}

// Whole buffers, retrying EINTR and short writes. A socket's peer gone is EPIPE without SIGPIPE
// (MSG_NOSIGNAL); a pipe or file (a worker run by hand) is written with write().
bool write_all(int fd, const char* p, size_t n) {
  bool is_socket = true;
  while (n > 0) {
    ssize_t w = is_socket ? ::send(fd, p, n, MSG_NOSIGNAL) : ::write(fd, p, n);
    if (w < 0 && is_socket && errno == ENOTSOCK) {
      is_socket = false;
      continue;
    }
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

// The process's private writable memory in bytes (/proc/self/status VmData: what RLIMIT_DATA
// counts), or -1.
int64_t data_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmData:", 0) == 0) return std::stoll(line.substr(7)) * 1024;  // "VmData:   1234 kB"
  return -1;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name != nullptr ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended (wait status " + std::to_string(status) + ")";
}

}  // namespace

void check_worker_memory_mib(int64_t mib, std::string_view flag) {
  if (mib < kMinWorkerMemoryMib || mib > kMaxWorkerMemoryMib)
    throw Error(std::string(flag) + ": " + std::to_string(mib) + " MiB; it must be " + std::to_string(kMinWorkerMemoryMib) +
                " to " + std::to_string(kMaxWorkerMemoryMib));
}

std::string encode_spec(const GrammarSpec& spec) {
  std::string out;
  out += char(int(spec.kind));
  out += char(spec.any_whitespace ? 1 : 0);
  put_string(out, spec.text);
  put_u32(out, uint32_t(spec.choices.size()));
  for (const std::string& c : spec.choices) put_string(out, c);
  if (out.size() > kMaxSpecFrame) throw Error("structured outputs: the constraint is larger than 64 MiB");
  return out;
}

GrammarSpec decode_spec(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t at = 0;
  auto need = [&](size_t n) {
    if (bytes.size() - at < n) throw Error("grammar worker: a truncated request");
  };
  auto string = [&] {
    need(4);
    const uint32_t n = get_u32(p + at);
    at += 4;
    need(n);
    std::string s(bytes.substr(at, n));
    at += n;
    return s;
  };
  GrammarSpec spec;
  need(2);
  if (p[0] > int(GrammarSpec::Kind::kStructuralTag) || p[1] > 1) throw Error("grammar worker: a malformed request");
  spec.kind = GrammarSpec::Kind(p[0]);
  spec.any_whitespace = p[1] == 1;
  at = 2;
  spec.text = string();
  need(4);
  const uint32_t choices = get_u32(p + at);
  at += 4;
  if (choices > bytes.size()) throw Error("grammar worker: a malformed request");  // 4 bytes each at least
  for (uint32_t i = 0; i < choices; ++i) spec.choices.push_back(string());
  if (at != bytes.size()) throw Error("grammar worker: a malformed request (bytes past its end)");
  return spec;
}

bool write_frame(int fd, std::string_view payload, std::string_view more) {
  if (payload.size() + more.size() > UINT32_MAX) {
    errno = EMSGSIZE;
    return false;
  }
  std::string head;
  put_u32(head, uint32_t(payload.size() + more.size()));
  if (more.empty() && payload.size() <= 4096) {  // one send: a short frame (kReady) arrives whole
    head += payload;
    return write_all(fd, head.data(), head.size());
  }
  return write_all(fd, head.data(), head.size()) && write_all(fd, payload.data(), payload.size()) &&
         write_all(fd, more.data(), more.size());
}

FrameStatus read_frame(int fd, std::string& out, uint32_t max_bytes,
                       std::optional<std::chrono::steady_clock::time_point> deadline, int stop_fd) {
  // Until fd is readable: kOk, or why not.
  auto wait = [&]() -> FrameStatus {
    if (!deadline && stop_fd < 0) return FrameStatus::kOk;  // a blocking read()
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    while (true) {
      // Past the deadline poll still looks once (0 ms): bytes already there are read, so a frame
      // that has arrived whole is never cut in two by the deadline.
      int ms = -1;
      if (deadline) {
        const auto left = std::chrono::duration<double, std::milli>(*deadline - std::chrono::steady_clock::now());
        ms = int(std::clamp(std::ceil(left.count()), 0.0, 3.6e6));
      }
      const int rc = ::poll(p, stop_fd >= 0 ? 2 : 1, ms);
      if (rc < 0) {
        if (errno == EINTR) continue;
        return FrameStatus::kError;
      }
      if (rc == 0 && ms == 0) return FrameStatus::kTimedOut;
      if (stop_fd >= 0 && p[1].revents != 0) return FrameStatus::kStopped;
      if (p[0].revents != 0) return FrameStatus::kOk;  // data, end of file or an error: read() tells
    }
  };
  auto read_exact = [&](char* into, size_t n) -> FrameStatus {
    while (n > 0) {
      if (const FrameStatus s = wait(); s != FrameStatus::kOk) return s;
      const ssize_t r = ::read(fd, into, n);
      if (r == 0) return FrameStatus::kClosed;
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        if (errno == ECONNRESET) return FrameStatus::kClosed;
        return FrameStatus::kError;
      }
      into += r;
      n -= size_t(r);
    }
    return FrameStatus::kOk;
  };
  unsigned char head[4];
  if (const FrameStatus s = read_exact(reinterpret_cast<char*>(head), 4); s != FrameStatus::kOk) return s;
  const uint32_t n = get_u32(head);
  if (n > max_bytes) return FrameStatus::kTooLarge;
  out.assign(n, '\0');
  return read_exact(out.data(), n);
}

// ---- the worker ------------------------------------------------------------------------------

int run_compile_worker(const CompileWorkerConfig& config, int fd) {
  // Its writes fail with EPIPE when the server is gone; it ends with the server (the thread
  // that started it, which lives as long as the worker) even in the middle of a compilation.
  ::signal(SIGPIPE, SIG_IGN);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto fatal = [&](const std::string& m) {
    write_frame(fd, std::string(1, char(WorkerTag::kFatal)) + m);
    return 1;
  };
  std::unique_ptr<GrammarVocabulary> vocabulary;
  try {
    // The tokenizer only builds the vocabulary: it goes before the memory limit is measured.
    const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::load(config.tokenizer_json);
    vocabulary = std::make_unique<GrammarVocabulary>(tokenizer, config.tokenizer_json, config.vocab_size,
                                                     config.eos_ids);
  } catch (const std::exception& e) {
    return fatal(e.what());
  }
  GrammarCompiler compiler(*vocabulary, /*threads=*/1, /*cache_bytes=*/0);  // one thread: no thread stacks to count
  // The bound is what a compilation may take beyond what the worker holds now (its vocabulary),
  // so that it means the same for a small and a large vocabulary.
  const int64_t now = data_bytes();
  if (now < 0) return fatal("grammar worker: cannot read /proc/self/status");
  const rlim_t limit = rlim_t(now) + (rlim_t(config.memory_mib) << 20);
  const rlimit r{limit, limit};
  if (::setrlimit(RLIMIT_DATA, &r) != 0)
    return fatal(std::string("grammar worker: setrlimit(RLIMIT_DATA): ") + std::strerror(errno));
  if (!write_frame(fd, std::string(1, char(WorkerTag::kReady)))) return 1;

  std::string request;
  while (true) {
    const FrameStatus s = read_frame(fd, request, kMaxSpecFrame);
    if (s == FrameStatus::kClosed) return 0;  // the server closed its end: done
    if (s != FrameStatus::kOk) return 1;
    try {
      const GrammarSpec spec = decode_spec(request);
      const std::string json = compiler.compile_uncached(spec)->serialize();
      bool sent;
      if (json.size() < kMaxReplyFrame) {
        const char tag = char(WorkerTag::kCompiled);
        sent = write_frame(fd, std::string_view(&tag, 1), json);  // the tag and the JSON, not copied together
      } else {
        sent = write_frame(fd, std::string(1, char(WorkerTag::kRefused)) + kind_name(spec.kind) +
                                   ": the compiled grammar is " + std::to_string(json.size() >> 20) +
                                   " MiB, over the " + std::to_string(kMaxReplyFrame >> 20) + " MiB a grammar may take");
      }
      if (!sent) return 1;
    } catch (const std::bad_alloc&) {
      // Its heap is not to be trusted after this: report, end, and be replaced.
      const char tag = char(WorkerTag::kOutOfMemory);
      write_frame(fd, std::string_view(&tag, 1));  // no allocation: the heap has just failed
      return 3;
    } catch (const std::exception& e) {
      if (!write_frame(fd, std::string(1, char(WorkerTag::kRefused)) + e.what())) return 1;
    }
  }
}

// ---- the server's side -----------------------------------------------------------------------

CompileWorker::CompileWorker(CompileWorkerConfig config, std::string exe)
    : config_(std::move(config)), exe_(std::move(exe)) {}

CompileWorker::~CompileWorker() { kill(); }

void CompileWorker::start() {
  if (pid_ > 0) return;
  int sv[2];
  // Close-on-exec: no other process this server starts inherits either end. The worker's end
  // becomes its stdin (dup2 clears the flag on the copy).
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("structured outputs: socketpair: ") + std::strerror(errno));
  std::vector<std::string> args = {"fp8lm",        "grammar-worker", "--tokenizer-json", config_.tokenizer_json.string(),
                                   "--vocab-size", std::to_string(config_.vocab_size), "--memory-mib",
                                   std::to_string(config_.memory_mib)};
  if (!config_.eos_ids.empty()) {
    std::string ids;
    for (const int32_t id : config_.eos_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    args.insert(args.end(), {"--eos-ids", ids});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t files;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&files);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&files, sv[1], 0);
  // Nothing else of the server's (its listening socket, clients' connections, files) stays open
  // in the worker, close-on-exec or not.
  posix_spawn_file_actions_addclosefrom_np(&files, 3);
  // The server blocks SIGINT / SIGTERM in every thread and ignores SIGPIPE; the worker starts with
  // neither. Its own process group: a terminal's Ctrl-C reaches the server, which drains and then
  // ends its workers, not the workers in the middle of a compilation.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (const int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe_.c_str(), &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    throw Error("structured outputs: cannot start the grammar worker (" + exe_ + "): " + std::strerror(rc));
  }
  pid_ = pid;
  fd_ = sv[0];
  ready_ = false;
  ++starts_;
}

std::string CompileWorker::reap() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::string how = "ended";
  if (pid_ > 0) {
    int status = 0;
    pid_t r;
    do r = ::waitpid(pid_, &status, 0);
    while (r < 0 && errno == EINTR);
    if (r == pid_) how = describe_status(status);
  }
  pid_ = 0;
  ready_ = false;
  return how;
}

void CompileWorker::kill() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
  reap();
}

CompileWorker::Reply CompileWorker::gone(Reply::Kind kind, std::string text) {
  kill();
  return Reply{kind, std::move(text)};
}

std::optional<CompileWorker::Reply> CompileWorker::await_ready(std::chrono::steady_clock::time_point deadline,
                                                               int stop_fd) {
  std::string frame;
  switch (read_frame(fd_, frame, 1 << 20, deadline, stop_fd)) {
    case FrameStatus::kOk: break;
    // Still loading its vocabulary: left to it (nothing of its frame was read: it comes in one
    // piece), for the next request; killing it would only start that again.
    case FrameStatus::kTimedOut: return Reply{Reply::Kind::kTimedOut, ""};
    case FrameStatus::kStopped: return Reply{Reply::Kind::kStopped, ""};
    case FrameStatus::kClosed: {
      const std::string how = reap();
      return Reply{Reply::Kind::kFailed, "the grammar worker " + how + " before it was ready"};
    }
    default: return gone(Reply::Kind::kFailed, "the grammar worker's first message could not be read");
  }
  if (frame == std::string(1, char(WorkerTag::kReady))) {
    ready_ = true;
    return std::nullopt;
  }
  if (!frame.empty() && frame[0] == char(WorkerTag::kFatal)) {
    reap();
    return Reply{Reply::Kind::kFailed, "the grammar worker: " + frame.substr(1)};
  }
  return gone(Reply::Kind::kFailed, "the grammar worker's first message is not one");
}

void CompileWorker::wait_ready(std::chrono::steady_clock::time_point deadline) {
  start();
  if (ready_) return;
  if (const auto r = await_ready(deadline, -1)) {
    if (r->kind == Reply::Kind::kTimedOut) throw Error("structured outputs: the grammar worker was not ready in time");
    throw Error("structured outputs: " + r->text);
  }
}

CompileWorker::Reply CompileWorker::compile(const GrammarSpec& spec, std::chrono::steady_clock::time_point deadline,
                                            int stop_fd) {
  if (std::chrono::steady_clock::now() >= deadline) return Reply{Reply::Kind::kTimedOut, ""};  // never sent
  std::string request;
  try {
    request = encode_spec(spec);  // before starting anything: a spec too large is the request's fault
    start();
  } catch (const Error& e) {
    return Reply{Reply::Kind::kFailed, e.what()};
  }
  if (!ready_)
    if (auto r = await_ready(deadline, stop_fd)) return *r;
  if (!write_frame(fd_, request)) {
    const std::string how = reap();  // EPIPE: it is gone
    return Reply{Reply::Kind::kDied, how};
  }
  std::string frame;
  switch (read_frame(fd_, frame, kMaxReplyFrame, deadline, stop_fd)) {
    case FrameStatus::kOk: break;
    case FrameStatus::kTimedOut: return gone(Reply::Kind::kTimedOut);
    case FrameStatus::kStopped: return gone(Reply::Kind::kStopped);
    case FrameStatus::kClosed: {
      const std::string how = reap();
      return Reply{Reply::Kind::kDied, how};
    }
    case FrameStatus::kTooLarge: return gone(Reply::Kind::kFailed, "the grammar worker's reply is too large");
    case FrameStatus::kError:
      return gone(Reply::Kind::kFailed, std::string("reading the grammar worker's reply: ") + std::strerror(errno));
  }
  const char tag = frame.empty() ? '\0' : frame[0];
  if (tag == char(WorkerTag::kCompiled) || tag == char(WorkerTag::kRefused)) {
    frame.erase(0, 1);
    return Reply{tag == char(WorkerTag::kCompiled) ? Reply::Kind::kCompiled : Reply::Kind::kRefused, std::move(frame)};
  }
  if (tag == char(WorkerTag::kOutOfMemory)) {
    reap();  // it exits on its own
    return Reply{Reply::Kind::kOutOfMemory, ""};
  }
  return gone(Reply::Kind::kFailed, "the grammar worker's reply is not one");
}

}  // namespace fp8lm::structured
