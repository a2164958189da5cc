#include "server/grammar_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "server/api_error.h"

namespace fp8lm::server {

using structured::CompileWorker;

namespace {

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

ApiError timeout_error(const structured::GrammarSpec& spec, const std::string& param, double seconds) {
  return ApiError(400,
                  std::string(structured::kind_name(spec.kind)) + ": compiling the constraint took longer than " +
                      number(seconds) + " s (--structured-outputs-timeout); simplify it",
                  param);
}

// `how`: how the worker ended when it did not report std::bad_alloc itself (an allocation that
// failed where xgrammar cannot throw ends the process instead); likely the bound all the same.
ApiError memory_error(const structured::GrammarSpec& spec, const std::string& param, int64_t mib,
                      const std::string& how) {
  return ApiError(400,
                  std::string(structured::kind_name(spec.kind)) + ": compiling the constraint needed more than the " +
                      std::to_string(mib) + " MiB a compilation may take (--structured-outputs-memory)" +
                      (how.empty() ? "" : "; its process " + how) + "; simplify it",
                  param);
}

}  // namespace

void GrammarPoolOptions::validate() const {
  if (threads < 1 || threads > 256)
    throw Error("--structured-outputs-threads: " + std::to_string(threads) + "; it must be 1 to 256");
  if (!(timeout_seconds > 0 && timeout_seconds <= 3600))
    throw Error("--structured-outputs-timeout: " + number(timeout_seconds) + " seconds; it must be in (0, 3600]");
  structured::check_worker_memory_mib(memory_mib, "--structured-outputs-memory");
}

GrammarPool::GrammarPool(const tokenizer::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_json,
                         int64_t vocab_size, std::span<const int32_t> eos_ids, GrammarPoolOptions options)
    : options_((options.validate(), std::move(options))),
      vocabulary_(tokenizer, tokenizer_json, vocab_size, eos_ids),
      compiler_(vocabulary_, /*threads=*/1, options_.cache_bytes) {
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw Error(std::string("structured outputs: pipe: ") + std::strerror(errno));
  const structured::CompileWorkerConfig config{tokenizer_json, vocab_size, {eos_ids.begin(), eos_ids.end()},
                                               options_.memory_mib};
  for (int i = 0; i < options_.threads; ++i)
    workers_.push_back(std::make_unique<CompileWorker>(config, options_.worker_exe));
  // Each thread starts its own worker (a worker ends with the thread that started it:
  // PR_SET_PDEATHSIG) and says when it is ready; a worker that cannot load the vocabulary stops
  // the server here, not at its first constrained request.
  // (Each promise is shared with its thread: set_value may still be returning when get() does.)
  std::vector<std::future<void>> ready;
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto promise = std::make_shared<std::promise<void>>();
    ready.push_back(promise->get_future());
    threads_.emplace_back([this, i, promise] { work(i, *promise); });
  }
  try {
    for (std::future<void>& r : ready) r.get();
  } catch (...) {
    shut_down();
    throw;
  }
}

GrammarPool::~GrammarPool() { shut_down(); }

void GrammarPool::stop() {
  std::deque<std::shared_ptr<Task>> queued;
  {
    std::lock_guard lock(m_);
    if (stop_) return;
    stop_ = true;
    queued.swap(queue_);
  }
  wake_.notify_all();
  if (stop_pipe_[1] >= 0) {
    ssize_t w;
    do w = ::write(stop_pipe_[1], "x", 1);  // never read: it stays readable for every thread
    while (w < 0 && errno == EINTR);
  }
  for (const auto& task : queued)
    task->result.set_exception(std::make_exception_ptr(shutting_down()));
}

void GrammarPool::shut_down() {
  stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  workers_.clear();  // kills and reaps those still running
  for (int& fd : stop_pipe_)
    if (fd >= 0) ::close(std::exchange(fd, -1));
}

int64_t GrammarPool::worker_starts() const {
  int64_t n = 0;
  for (const auto& w : workers_) n += w->starts();
  return n;
}

void GrammarPool::work(size_t i, std::promise<void>& ready) {
  CompileWorker& worker = *workers_[i];
  try {
    worker.wait_ready(std::chrono::steady_clock::now() + std::chrono::seconds(120));
    ready.set_value();
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  while (true) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock lock(m_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task->result.set_value(compiler_.compile(
          task->spec, [&](const structured::GrammarSpec&) { return compile_in(worker, *task); }));
    } catch (...) {
      task->result.set_exception(std::current_exception());
    }
    // A worker that ended (killed past the deadline, or past its memory) is replaced now, so that
    // the next request does not wait for it to load the vocabulary; a failure here is the next
    // request's, which tries again.
    {
      std::lock_guard lock(m_);
      if (stop_) return;
    }
    if (worker.pid() == 0) {
      try {
        worker.start();
      } catch (const Error& e) {
        std::fprintf(stderr, "fp8lm: warning: %s\n", e.what());
      }
    }
  }
}

std::shared_ptr<const structured::CompiledGrammar> GrammarPool::compile_in(CompileWorker& worker, const Task& task) {
  CompileWorker::Reply r = worker.compile(task.spec, task.deadline, stop_pipe_[0]);
  using Kind = CompileWorker::Reply::Kind;
  switch (r.kind) {
    case Kind::kCompiled: return structured::CompiledGrammar::deserialize(r.text, vocabulary_);
    case Kind::kRefused: throw Error(r.text);  // the library's words, as compiling here would give them
    case Kind::kOutOfMemory: throw memory_error(task.spec, task.param, options_.memory_mib, "");
    case Kind::kDied: throw memory_error(task.spec, task.param, options_.memory_mib, r.text);
    case Kind::kTimedOut: throw timeout_error(task.spec, task.param, options_.timeout_seconds);
    case Kind::kStopped:
      throw shutting_down();
    case Kind::kFailed: break;
  }
  throw ApiError(500, "structured outputs: " + r.text, "", "", "server_error");
}

std::shared_ptr<const structured::CompiledGrammar> GrammarPool::compile(const structured::GrammarSpec& spec,
                                                                        const std::string& param) {
  auto task = std::make_shared<Task>();
  task->spec = spec;
  task->param = param;
  task->deadline = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(options_.timeout_seconds));
  std::future<std::shared_ptr<const structured::CompiledGrammar>> done = task->result.get_future();
  {
    std::lock_guard lock(m_);
    if (stop_) throw shutting_down();
    if (queue_.size() >= options_.max_queued)
      throw ApiError(503,
                     "the server is overloaded: " + std::to_string(queue_.size()) +
                         " structured-output compilations are waiting; retry later",
                     "", "", "server_overloaded");
    queue_.push_back(task);
  }
  wake_.notify_one();
  // The thread compiling it ends the worker at the same deadline; a little slack lets its answer
  // (the same 400) come back rather than racing it.
  if (done.wait_until(task->deadline + std::chrono::milliseconds(50)) != std::future_status::ready) {
    {
      // Not started yet: it never will be.
      std::lock_guard lock(m_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if (*it == task) {
          queue_.erase(it);
          break;
        }
    }
    throw timeout_error(spec, param, options_.timeout_seconds);
  }
  try {
    return done.get();
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, std::string(param) + ": " + e.what(), param);
  }
}

}  // namespace fp8lm::server
