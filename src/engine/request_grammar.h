// A constrained request's grammar state (structured outputs, issue 43), one piece for the batched
// engine and generate(): the matcher — whose stop tokens are the model's EOS ids and the request's
// stop_token_ids — the mask of its next draw, which the request's sampler reads
// (Sampler::set_allowed), and the tokens kept but not yet accepted into the matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence_output.h"
#include "structured/grammar_matcher.h"

namespace fp8lm::engine {

class RequestGrammar {
 public:
  // Points `sampler` at this object's mask, which must therefore stay where it is (the object is
  // neither copied nor moved). Throws fp8lm::Error when `grammar` was compiled for a vocabulary of
  // another size than the model's `vocab`.
  RequestGrammar(std::shared_ptr<const structured::CompiledGrammar> grammar, int64_t vocab,
                 std::span<const int32_t> eos_ids, const SamplingParams& params, Sampler& sampler);
  RequestGrammar(const RequestGrammar&) = delete;
  RequestGrammar& operator=(const RequestGrammar&) = delete;

  // Tokens generated: accepted by the next settle().
  void keep(std::span<const int32_t> tokens) { unaccepted_.insert(unaccepted_.end(), tokens.begin(), tokens.end()); }
  // Accepts the kept tokens; the first the grammar refuses, if any (those after it are dropped).
  std::optional<int32_t> settle();
  // The next draw's mask from the matcher (settle() first), or every token allowed (a request that
  // failed: its row's token is dropped).
  void fill_mask() { matcher_.fill_mask(mask_); }
  void allow_all();
  bool terminated() const { return matcher_.terminated(); }
  // When the grammar is complete but `s` did not end the output (ignore_eos: its stop token was no
  // stop of the output's own), ends it with "stop" and returns the text held back until then.
  std::string end_if_complete(SequenceOutput& output, SequenceOutput::Step& s) const;

 private:
  structured::GrammarMatcher matcher_;
  std::vector<uint32_t> mask_;
  std::vector<int32_t> unaccepted_;
};

}  // namespace fp8lm::engine
