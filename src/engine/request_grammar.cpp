#include "engine/request_grammar.h"

#include <algorithm>

#include "common/error.h"

namespace fp8lm::engine {
namespace {

std::shared_ptr<const structured::CompiledGrammar> checked(std::shared_ptr<const structured::CompiledGrammar> g,
                                                           int64_t vocab) {
  if (g && g->vocab_size() != vocab)
    throw Error("the grammar was compiled for a vocabulary of " + std::to_string(g->vocab_size()) +
                " ids, the model has " + std::to_string(vocab));
  return g;
}

std::vector<int32_t> stops_of(std::span<const int32_t> eos_ids, const SamplingParams& params) {
  std::vector<int32_t> stops(eos_ids.begin(), eos_ids.end());
  stops.insert(stops.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
  return stops;
}

}  // namespace

RequestGrammar::RequestGrammar(std::shared_ptr<const structured::CompiledGrammar> grammar, int64_t vocab,
                               std::span<const int32_t> eos_ids, const SamplingParams& params, Sampler& sampler)
    : matcher_(checked(std::move(grammar), vocab), stops_of(eos_ids, params)),
      mask_(structured::mask_words(vocab), 0u) {
  sampler.set_allowed(mask_);
}

std::optional<int32_t> RequestGrammar::settle() {
  std::optional<int32_t> refused;
  for (const int32_t t : unaccepted_)
    if (!matcher_.accept(t)) {
      refused = t;
      break;
    }
  unaccepted_.clear();
  return refused;
}

void RequestGrammar::allow_all() { std::fill(mask_.begin(), mask_.end(), ~0u); }

std::string RequestGrammar::end_if_complete(SequenceOutput& output, SequenceOutput::Step& s) const {
  if (s.finished || !terminated()) return {};
  SequenceOutput::Step end = output.end("stop");
  s.finished = true;
  s.finish_reason = end.finish_reason;
  return std::move(end.tail);
}

}  // namespace fp8lm::engine
