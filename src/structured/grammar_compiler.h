// Grammar specs → compiled grammars against one vocabulary (xgrammar's GrammarCompiler: the
// grammar and the per-state token-mask cache that makes a step's mask cheap), cached per spec.
// Compiling a JSON schema takes milliseconds to seconds; the cache makes a repeated schema (the
// usual case: a client's one tool or response schema) free. Thread-safe: requests are compiled on
// the threads that parse them, never on the engine's, and concurrent requests for one spec share
// one compilation.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "structured/grammar_spec.h"
#include "structured/grammar_vocabulary.h"

namespace fp8lm::structured {

struct GrammarHandle;  // xgrammar_handles.h

// A grammar compiled against a vocabulary: what a GrammarMatcher (grammar_matcher.h) runs.
class CompiledGrammar {
 public:
  CompiledGrammar(std::unique_ptr<GrammarHandle> handle, int64_t vocab_size);
  ~CompiledGrammar();
  const GrammarHandle& handle() const { return *handle_; }
  int64_t vocab_size() const { return vocab_size_; }
  // Its size in memory (the grammar and its mask cache).
  int64_t memory_bytes() const;

  // The grammar and its mask cache as xgrammar's JSON (CompiledGrammar::SerializeJSON), and back
  // against `vocabulary`: how a grammar compiled in another process (compile_worker.h) comes to
  // this one. deserialize throws fp8lm::Error when the text is not a compiled grammar of a
  // vocabulary like this one (xgrammar checks the tokenizer's metadata and every mask's ids).
  std::string serialize() const;
  static std::shared_ptr<const CompiledGrammar> deserialize(const std::string& json,
                                                            const GrammarVocabulary& vocabulary);

 private:
  std::unique_ptr<GrammarHandle> handle_;
  int64_t vocab_size_ = 0;
};

class GrammarCompiler {
 public:
  // `threads`: threads one compilation may use; `cache_bytes`: what the cached compiled grammars
  // may hold together (least recently used first out; one larger than it is used, not cached).
  GrammarCompiler(const GrammarVocabulary& vocabulary, int threads = 2, int64_t cache_bytes = int64_t(512) << 20);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // The spec compiled, or from the cache. Throws fp8lm::Error naming what is wrong: an invalid
  // schema, regex or grammar, a schema feature the library does not implement, an empty choice list.
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec);
  // The same cache, with `build` compiling a miss instead of this process (the server's worker
  // processes, compile_worker.h); what `build` throws is the caller's (and is not cached).
  using Builder = std::function<std::shared_ptr<const CompiledGrammar>(const GrammarSpec&)>;
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec, const Builder& build);
  // The spec compiled in this process, never cached: what a worker process runs. Throws as
  // compile(), and std::bad_alloc as it is (a worker reports it as its memory bound).
  std::shared_ptr<const CompiledGrammar> compile_uncached(const GrammarSpec& spec) { return build(spec); }

  struct Stats {
    int64_t compilations = 0;  // compiled (cache misses that succeeded)
    int64_t cache_hits = 0;
    int64_t failures = 0;      // specs refused
    int64_t cached_bytes = 0;
    double compile_seconds = 0;  // the compilations' time, summed
  };
  Stats stats() const;
  const GrammarVocabulary& vocabulary() const { return vocabulary_; }

 private:
  struct Library;
  using Result = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Result result;
    std::list<std::string>::iterator lru;  // its key's place in lru_
    int64_t bytes = 0;                     // 0 until compiled
  };

  std::shared_ptr<const CompiledGrammar> build(const GrammarSpec& spec);
  void evict_locked();

  const GrammarVocabulary& vocabulary_;
  std::unique_ptr<Library> library_;
  const int64_t cache_bytes_;
  mutable std::mutex mutex_;  // guards everything below
  std::map<std::string, Entry> cache_;
  std::list<std::string> lru_;  // most recently used first
  Stats stats_;
};

}  // namespace fp8lm::structured
