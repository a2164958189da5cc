// --reasoning-parser: the text a reasoning model writes between <think> and
// </think> goes to `reasoning_content`, the rest to `content` — in whole
// responses and in streaming deltas alike (one state machine for both, so a
// stream's deltas always add up to the whole response).
//
//   qwen3:       reasoning only when the output starts with <think>; without
//                it, everything is content.
//   deepseek_r1: the output starts inside the reasoning (the template opened
//                <think>; a leading <think> is dropped too); everything up to
//                </think> is reasoning, all of it when </think> never comes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fp8lm::server {

enum class ReasoningParser : uint8_t { kNone, kQwen3, kDeepSeekR1 };

// "" or "none" -> kNone, "qwen3", "deepseek_r1"; throws fp8lm::Error otherwise.
ReasoningParser parse_reasoning_parser(const std::string& name);

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(ReasoningParser parser);

  struct Delta {
    std::string reasoning;
    std::string content;
  };
  // The next piece of generated text; what of it is final (a piece of a tag
  // is held back until the text after it decides).
  Delta push(std::string_view text);
  // End of the output: what was held back.
  Delta finish();

 private:
  enum class State : uint8_t { kStart, kReasoning, kContent };
  ReasoningParser parser_;
  State state_;
  std::string pending_;  // held back: a possible start of <think> / </think>
  void drain(Delta& d, bool at_end);
};

}  // namespace fp8lm::server
