// The server's structured-output compilations (issue 43): a request's schema, regex or grammar is
// compiled against the served model's vocabulary off the engine's thread, within a time and a
// memory bound, and cached per spec (structured::GrammarCompiler, in this process). Each of the
// pool's threads owns one worker process (structured::CompileWorker: this binary re-executed as
// `fp8lm grammar-worker`, with the same vocabulary and an RLIMIT_DATA of its own), sends it the
// spec and rebuilds the compiled grammar it answers with. A compilation past the time bound is
// ended (SIGKILL: xgrammar cannot be interrupted) and its request gets a 400 naming the bound; one
// past the memory bound ends its worker and its request gets a 400 naming that bound. Either way
// the thread starts a new worker at once and goes on: a pathological spec costs its own request,
// never a thread, a CPU or the server's memory, and unconstrained requests are not affected at all.
#pragma once

#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "structured/compile_worker.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::server {

struct GrammarPoolOptions {
  int threads = 2;                           // compilations at once: a worker process each
  double timeout_seconds = 30.0;             // per request, waiting for a thread included
  int64_t memory_mib = 2048;                 // what one compilation may take (a worker's bound)
  int64_t cache_bytes = int64_t(512) << 20;  // compiled grammars kept (structured::GrammarCompiler)
  size_t max_queued = 256;                   // compilations waiting for a thread before 503s
  std::string worker_exe = "/proc/self/exe";  // the binary that has `grammar-worker`: this one

  // Throws fp8lm::Error naming the flag out of range (--structured-outputs-threads / -timeout /
  // -memory): the server checks them before it loads the model.
  void validate() const;
};

class GrammarPool {
 public:
  // Starts the workers and waits until each holds the vocabulary; throws fp8lm::Error when one
  // cannot (the worker's words).
  GrammarPool(const tokenizer::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_json, int64_t vocab_size,
              std::span<const int32_t> eos_ids, GrammarPoolOptions options);
  ~GrammarPool();  // stop(), then joins the threads and ends the workers
  // Ends the compilations in progress (their workers killed) and waiting: their requests, and any
  // later one, get a 503. The server calls it when it starts to stop: a request compiling then
  // could not be queued any more anyway.
  void stop();
  GrammarPool(const GrammarPool&) = delete;
  GrammarPool& operator=(const GrammarPool&) = delete;

  // The compiled spec. Throws ApiError: 400 naming `param` for a spec the library refuses or a
  // compilation beyond the time or the memory bound, 503 when too many wait for a thread or the
  // server is stopping, 500 when a worker cannot be started.
  std::shared_ptr<const structured::CompiledGrammar> compile(const structured::GrammarSpec& spec,
                                                             const std::string& param);

  structured::GrammarCompiler::Stats stats() const { return compiler_.stats(); }
  const GrammarPoolOptions& options() const { return options_; }
  // Worker processes started so far (one a thread at the start, one more after each that ended).
  int64_t worker_starts() const;

 private:
  struct Task {
    structured::GrammarSpec spec;
    std::string param;
    std::chrono::steady_clock::time_point deadline;
    std::promise<std::shared_ptr<const structured::CompiledGrammar>> result;
  };
  void work(size_t i, std::promise<void>& ready);
  std::shared_ptr<const structured::CompiledGrammar> compile_in(structured::CompileWorker& worker, const Task& task);
  void shut_down();

  GrammarPoolOptions options_;
  structured::GrammarVocabulary vocabulary_;
  structured::GrammarCompiler compiler_;
  std::vector<std::unique_ptr<structured::CompileWorker>> workers_;  // workers_[i]: thread i's alone
  int stop_pipe_[2] = {-1, -1};  // readable once stopping: wakes threads waiting on a worker
  std::mutex m_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Task>> queue_;  // guarded by m_
  bool stop_ = false;                        // guarded by m_
  std::vector<std::thread> threads_;
};

}  // namespace fp8lm::server
