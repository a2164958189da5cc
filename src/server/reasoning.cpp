#include "server/reasoning.h"

#include "common/error.h"

namespace fp8lm::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningParser parse_reasoning_parser(const std::string& name) {
  if (name.empty() || name == "none") return ReasoningParser::kNone;
  if (name == "qwen3") return ReasoningParser::kQwen3;
  if (name == "deepseek_r1") return ReasoningParser::kDeepSeekR1;
  throw Error("--reasoning-parser: '" + name + "' is not one of qwen3, deepseek_r1");
}

ReasoningSplitter::ReasoningSplitter(ReasoningParser parser)
    : parser_(parser), state_(parser == ReasoningParser::kNone ? State::kContent : State::kStart) {}

ReasoningSplitter::Delta ReasoningSplitter::push(std::string_view text) {
  Delta d;
  pending_.append(text);
  drain(d, false);
  return d;
}

ReasoningSplitter::Delta ReasoningSplitter::finish() {
  Delta d;
  drain(d, true);
  return d;
}

void ReasoningSplitter::drain(Delta& d, bool at_end) {
  while (true) {
    switch (state_) {
      case State::kStart: {
        // Undecided until the text is long enough to tell whether it opens with <think>.
        const size_t n = std::min(pending_.size(), kOpen.size());
        if (std::string_view(pending_).substr(0, n) != kOpen.substr(0, n)) {
          state_ = parser_ == ReasoningParser::kQwen3 ? State::kContent : State::kReasoning;
          continue;
        }
        if (pending_.size() >= kOpen.size()) {
          pending_.erase(0, kOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (at_end) {  // a bare "<thi": ordinary text
          state_ = parser_ == ReasoningParser::kQwen3 ? State::kContent : State::kReasoning;
          continue;
        }
        return;
      }
      case State::kReasoning: {
        const size_t at = pending_.find(kClose);
        if (at != std::string::npos) {
          d.reasoning.append(pending_, 0, at);
          pending_.erase(0, at + kClose.size());
          state_ = State::kContent;
          continue;
        }
        const size_t keep = at_end ? 0 : partial_suffix(pending_, kClose);
        d.reasoning.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kContent:
        d.content += pending_;
        pending_.clear();
        return;
    }
  }
}

}  // namespace fp8lm::server
