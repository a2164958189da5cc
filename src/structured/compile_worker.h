// Grammar compilation in a child process (issue 43: "a time AND memory bound, so a pathological
// schema cannot stall other requests"). xgrammar can be neither interrupted nor told how much memory
// it may take, so the server compiles in worker processes it can kill: each worker is the fp8lm
// binary itself re-executed with a hidden subcommand (`fp8lm grammar-worker`, src/cli), holding the
// model's vocabulary as the server does (the same tokenizer.json, vocabulary size and EOS ids) and a
// memory limit of its own (RLIMIT_DATA). It compiles the specs it is sent on its stdin (a socket)
// and answers each with the compiled grammar as xgrammar's JSON, which the server rebuilds against
// its own vocabulary (CompiledGrammar::deserialize) and caches. A compilation past its deadline is
// ended with SIGKILL; one past the memory limit ends its worker (std::bad_alloc, or a death);
// either way the worker is started again and only that request fails.
//
// The protocol: frames of a 4-byte little-endian length and that many bytes, both ways. A request
// is one spec (encode_spec). A reply is a tag byte and its text: the worker's first frame is
// kReady (or kFatal: it could not load the vocabulary); then one reply a request: kCompiled (the
// JSON), kRefused (the fp8lm::Error the library's refusal became, the same words as compiling in
// this process) or kOutOfMemory (after which the worker exits).
//
// `fp8lm generate` and `bench structured` compile in their own process (GrammarCompiler alone):
// one request each, nothing else to stall.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar_spec.h"

namespace fp8lm::structured {

// The largest frames each way: a spec (a request body is smaller: the server bounds it) and a
// compiled grammar's JSON (a worker's memory limit bounds it well below this).
constexpr uint32_t kMaxSpecFrame = uint32_t(64) << 20;
constexpr uint32_t kMaxReplyFrame = uint32_t(1) << 30;

enum class WorkerTag : char { kReady = 'R', kFatal = 'F', kCompiled = 'C', kRefused = 'E', kOutOfMemory = 'M' };

// A spec as bytes and back (any bytes in its strings). decode_spec throws fp8lm::Error for a
// malformed one.
std::string encode_spec(const GrammarSpec& spec);
GrammarSpec decode_spec(std::string_view bytes);

// Writes one frame of `payload` followed by `more`, retrying EINTR and short writes; send() with
// MSG_NOSIGNAL on a socket (a peer gone is EPIPE, never SIGPIPE), write() otherwise. False (errno
// set) when the peer is gone or the frame is larger than UINT32_MAX.
bool write_frame(int fd, std::string_view payload, std::string_view more = {});

enum class FrameStatus { kOk, kClosed, kTimedOut, kStopped, kTooLarge, kError };
// Reads one frame into `out`: kClosed at end of file (also in mid-frame), kTooLarge for a length
// over `max_bytes` (nothing more is read), kTimedOut at `deadline` (when given), kStopped when
// `stop_fd` (when >= 0) becomes readable, kError for a read error (errno set). EINTR is retried.
FrameStatus read_frame(int fd, std::string& out, uint32_t max_bytes,
                       std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt,
                       int stop_fd = -1);

// What a worker is started with: its command line's values.
struct CompileWorkerConfig {
  std::filesystem::path tokenizer_json;  // the served model's (its tokenizer_config.json beside it is read too)
  int64_t vocab_size = 0;                // the model's (the logits' width)
  std::vector<int32_t> eos_ids;
  // What one compilation may take beyond the loaded vocabulary, its JSON for the server included
  // (which can take several times the compiled grammar's size: xgrammar builds it as a tree first).
  int64_t memory_mib = 2048;
};
// The bounds of --structured-outputs-memory, in MiB.
constexpr int64_t kMinWorkerMemoryMib = 16;
constexpr int64_t kMaxWorkerMemoryMib = int64_t(1) << 20;  // 1 TiB
// Throws fp8lm::Error naming `flag` (the command line's name for it) when `mib` is out of those bounds.
void check_worker_memory_mib(int64_t mib, std::string_view flag);

// The worker's side (`fp8lm grammar-worker`): loads the vocabulary, sets its memory limit,
// answers requests on `fd` until it is closed. Returns the process's exit status.
int run_compile_worker(const CompileWorkerConfig& config, int fd);

// The server's side: one worker process, used by one thread at a time.
class CompileWorker {
 public:
  struct Reply {
    enum class Kind {
      kCompiled,     // text: the compiled grammar's JSON
      kRefused,      // text: the library's refusal (fp8lm::Error's words)
      kOutOfMemory,  // the worker reached its memory limit (std::bad_alloc); it was ended
      kDied,         // the worker ended on its own (text: how, e.g. "killed by signal 9"); likely memory too
      kTimedOut,     // the deadline passed; the worker was killed
      kStopped,      // stop_fd became readable; the worker was killed
      kFailed,       // the worker could not be started or answered nonsense (text: why)
    };
    Kind kind = Kind::kFailed;
    std::string text;
  };

  // `exe`: the fp8lm binary ("/proc/self/exe": this one, even when its file was replaced since).
  CompileWorker(CompileWorkerConfig config, std::string exe = "/proc/self/exe");
  ~CompileWorker();  // kills and reaps the worker
  CompileWorker(const CompileWorker&) = delete;
  CompileWorker& operator=(const CompileWorker&) = delete;

  // Starts the process unless it runs (not waiting for it to be ready). Throws fp8lm::Error.
  void start();
  // start(), then waits until the worker has loaded its vocabulary. Throws fp8lm::Error with the
  // worker's own message when it cannot (a tokenizer it cannot read), or past `deadline`.
  void wait_ready(std::chrono::steady_clock::time_point deadline);
  // Compiles `spec` in the worker (started first when it is not running), waiting until `deadline`
  // or until `stop_fd` is readable. After any reply but kCompiled and kRefused the worker is gone
  // (the next call, or start(), starts another) — except a deadline or stop that came while it was
  // still loading its vocabulary: it is left to load, for the next call.
  Reply compile(const GrammarSpec& spec, std::chrono::steady_clock::time_point deadline, int stop_fd = -1);
  // SIGKILL and waitpid (no zombie); a no-op when none runs.
  void kill();

  pid_t pid() const { return pid_; }  // 0 when none runs
  int64_t starts() const { return starts_.load(); }  // processes started (any thread may ask)

 private:
  // The worker's first frame (kReady), read once after each start.
  std::optional<Reply> await_ready(std::chrono::steady_clock::time_point deadline, int stop_fd);
  Reply gone(Reply::Kind kind, std::string text = "");  // kill() and a reply of that kind
  std::string reap();  // waitpid after the worker closed its end: how it ended

  CompileWorkerConfig config_;
  std::string exe_;
  pid_t pid_ = 0;
  int fd_ = -1;  // our end of the socket pair
  bool ready_ = false;
  std::atomic<int64_t> starts_{0};
};

}  // namespace fp8lm::structured
