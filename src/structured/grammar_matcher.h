// One sequence's place in its grammar: which tokens may come next (a bitmask over the
// vocabulary), and the tokens it generated, accepted one by one. The engine keeps one per
// constrained request; its masks go to sampling (backend::RowSampling::allowed), which removes
// every other token before penalties, temperature and the filters, so the output is always in
// the grammar's language, ending with an EOS id once the grammar is complete.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "structured/grammar_compiler.h"

namespace fp8lm::structured {

// Words of a mask over `vocab` ids: bit (id % 32) of word id / 32 is set when id is allowed (the
// layout of xgrammar's and vLLM's bitmasks).
inline size_t mask_words(int64_t vocab) { return size_t((vocab + 31) / 32); }
inline bool mask_allows(std::span<const uint32_t> mask, int32_t id) {
  return (mask[size_t(id) / 32] >> (uint32_t(id) % 32)) & 1u;
}

class GrammarMatcher {
 public:
  // `stop_ids`: the tokens that end the sequence (the model's EOS ids and the request's
  // stop_token_ids): allowed where the grammar is complete, and only there.
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::span<const int32_t> stop_ids);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&) = delete;
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // The next token's mask, mask_words(vocab_size()) words. A terminated matcher allows nothing.
  void fill_mask(std::span<uint32_t> words);
  // Takes the next token; false (and nothing changes) when the grammar does not allow it.
  bool accept(int32_t token);
  // A stop token was accepted: nothing may follow.
  bool terminated() const;
  int64_t vocab_size() const { return grammar_->vocab_size(); }

 private:
  struct Impl;
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8lm::structured
