// Stop strings over streamed text (OpenAI semantics): text is emitted as soon
// as it can no longer be part of a stop string; a matched stop string and
// everything after it are never emitted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8lm::engine {

class StopChecker {
 public:
  // Throws fp8lm::Error for an empty or invalid-UTF-8 stop string.
  explicit StopChecker(std::vector<std::string> stops);

  struct Step {
    std::string text;     // safe to emit now (may be empty)
    bool stopped = false; // a stop string matched: end the sequence
    std::string matched;  // which one, when stopped
  };

  // Feeds the next piece of decoded text (as the incremental detokenizer
  // emits it). After a stop, further pieces are ignored.
  Step push(std::string_view piece);

  // The sequence ended for another reason (EOS, max_tokens): the text held
  // back, with any incomplete trailing UTF-8 sequence dropped. Empty after a stop.
  std::string finish();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // could still begin a stop string (or ends mid-character)
  bool stopped_ = false;
};

}  // namespace fp8lm::engine
