#include "server/grammar_pool.h"

#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "server/api_error.h"

namespace fp8lm::server {

GrammarPool::GrammarPool(const tokenizer::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_json,
                         int64_t vocab_size, std::span<const int32_t> eos_ids, GrammarPoolOptions options)
    : options_(options),
      vocabulary_(tokenizer, tokenizer_json, vocab_size, eos_ids),
      compiler_(vocabulary_, /*threads=*/1, options.cache_bytes) {
  if (options_.threads < 1) throw Error("--structured-outputs-threads: must be at least 1");
  if (!(options_.timeout_seconds > 0 && options_.timeout_seconds <= 3600))
    throw Error("--structured-outputs-timeout: " + std::to_string(options_.timeout_seconds) +
                " seconds; it must be in (0, 3600]");
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { work(); });
}

GrammarPool::~GrammarPool() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void GrammarPool::work() {
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
      task->result.set_value(compiler_.compile(task->spec));
    } catch (...) {
      task->result.set_exception(std::current_exception());
    }
  }
}

std::shared_ptr<const structured::CompiledGrammar> GrammarPool::compile(const structured::GrammarSpec& spec,
                                                                        const std::string& param) {
  auto task = std::make_shared<Task>();
  task->spec = spec;
  std::future<std::shared_ptr<const structured::CompiledGrammar>> done = task->result.get_future();
  {
    std::lock_guard lock(m_);
    if (queue_.size() >= options_.max_queued)
      throw ApiError(503,
                     "the server is overloaded: " + std::to_string(queue_.size()) +
                         " structured-output compilations are waiting; retry later",
                     "", "", "server_overloaded");
    queue_.push_back(task);
  }
  wake_.notify_one();
  const auto bound = std::chrono::duration<double>(options_.timeout_seconds);
  if (done.wait_for(bound) != std::future_status::ready) {
    {
      // Not started yet: it never will be. Started: it runs on, and its result is cached.
      std::lock_guard lock(m_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it)
        if (*it == task) {
          queue_.erase(it);
          break;
        }
    }
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", options_.timeout_seconds);
    throw ApiError(400,
                   std::string(structured::kind_name(spec.kind)) + ": compiling the constraint took longer than " +
                       seconds + " s (--structured-outputs-timeout); simplify it",
                   param);
  }
  try {
    return done.get();
  } catch (const Error& e) {
    throw ApiError(400, std::string(param) + ": " + e.what(), param);
  }
}

}  // namespace fp8lm::server
