#include "structured/grammar_matcher.h"

#include <algorithm>

#include "common/error.h"
#include "structured/xgrammar_handles.h"

namespace fp8lm::structured {

struct GrammarMatcher::Impl {
  xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::span<const int32_t> stop_ids)
    : grammar_(std::move(grammar)) {
  if (!grammar_) throw Error("structured outputs: a grammar matcher without a grammar");
  std::vector<int> stops(stop_ids.begin(), stop_ids.end());
  std::sort(stops.begin(), stops.end());
  stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
  for (const int id : stops)
    if (id < 0 || id >= grammar_->vocab_size())
      throw Error("structured outputs: stop token id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(grammar_->vocab_size()));
  impl_ = std::make_unique<Impl>(Impl{xgrammar::GrammarMatcher(grammar_->handle().grammar, std::move(stops))});
}

GrammarMatcher::~GrammarMatcher() = default;

void GrammarMatcher::fill_mask(std::span<uint32_t> words) {
  if (words.size() != mask_words(vocab_size()))
    throw Error("structured outputs: a mask of " + std::to_string(words.size()) + " words for a vocabulary of " +
                std::to_string(vocab_size()) + " ids (" + std::to_string(mask_words(vocab_size())) + " words)");
  if (impl_->matcher.IsTerminated()) {
    std::fill(words.begin(), words.end(), 0u);
    return;
  }
  int64_t shape[1] = {int64_t(words.size())};
  DLTensor t{words.data(), DLDevice{kDLCPU, 0}, 1, xgrammar::GetBitmaskDLType(), shape, nullptr, 0};
  impl_->matcher.FillNextTokenBitmask(&t);
}

bool GrammarMatcher::accept(int32_t token) {
  if (token < 0 || token >= vocab_size() || impl_->matcher.IsTerminated()) return false;
  return impl_->matcher.AcceptToken(token);
}

bool GrammarMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace fp8lm::structured
