#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string IncrementalDecoder::push(std::uint32_t id) {
  ids_.push_back(id);
  std::string text = tokenizer_->decode(ids_, skip_special_);
  // A trailing U+FFFD may be a character still missing bytes: wait for more.
  if (text.size() <= prefix_.size() || !text.starts_with(prefix_) || text.ends_with(utf8::kReplacementChar))
    return {};
  std::string fresh = text.substr(prefix_.size());
  // The pending ids become the context of what follows.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(context_));
  context_ = ids_.size();
  prefix_ = tokenizer_->decode(ids_, skip_special_);
  return fresh;
}

std::string IncrementalDecoder::finish() {
  std::string text = tokenizer_->decode(ids_, skip_special_);
  std::string rest;
  if (text.starts_with(prefix_)) rest = text.substr(prefix_.size());
  else rest = tokenizer_->decode(std::span<const std::uint32_t>(ids_).subspan(context_), skip_special_);
  ids_.clear();
  context_ = 0;
  prefix_.clear();
  return rest;
}

}  // namespace fp8lm::tokenizer
