// The server's structured-output compilations (issue 43): a request's schema, regex or grammar is
// compiled against the served model's vocabulary on threads of this pool — never on the engine's
// thread, so that a slow compilation delays only the request that asked for it — within a time
// bound, and cached per spec (structured::GrammarCompiler). A request whose compilation does not
// finish within the bound gets a 400 naming the bound; the compilation itself runs on (xgrammar
// cannot be interrupted) and holds one of the pool's threads until it ends, so at most `threads`
// slow compilations run at once and further constrained requests wait for a thread, within the
// same bound, while unconstrained requests are not affected at all.
#pragma once

#include <condition_variable>
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

#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::server {

struct GrammarPoolOptions {
  int threads = 2;                          // compilations at once
  double timeout_seconds = 30.0;            // per request, waiting for a thread included
  int64_t cache_bytes = int64_t(512) << 20;  // compiled grammars kept (structured::GrammarCompiler)
  size_t max_queued = 256;                   // compilations waiting for a thread before 503s
};

class GrammarPool {
 public:
  GrammarPool(const tokenizer::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_json, int64_t vocab_size,
              std::span<const int32_t> eos_ids, GrammarPoolOptions options);
  ~GrammarPool();  // waits for the compilations in progress
  GrammarPool(const GrammarPool&) = delete;
  GrammarPool& operator=(const GrammarPool&) = delete;

  // The compiled spec. Throws ApiError: 400 naming `param` for a spec the library refuses or a
  // compilation beyond the time bound, 503 when too many wait for a thread.
  std::shared_ptr<const structured::CompiledGrammar> compile(const structured::GrammarSpec& spec,
                                                             const std::string& param);

  structured::GrammarCompiler::Stats stats() const { return compiler_.stats(); }
  const GrammarPoolOptions& options() const { return options_; }

 private:
  struct Task {
    structured::GrammarSpec spec;
    std::promise<std::shared_ptr<const structured::CompiledGrammar>> result;
  };
  void work();

  GrammarPoolOptions options_;
  structured::GrammarVocabulary vocabulary_;
  structured::GrammarCompiler compiler_;
  std::mutex m_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Task>> queue_;  // guarded by m_
  bool stop_ = false;                        // guarded by m_
  std::vector<std::thread> threads_;
};

}  // namespace fp8lm::server
