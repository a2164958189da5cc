// What becomes of each token a sequence generates, shared by generate() and the
// batched engine: the stop conditions (EOS / stop token, stop string,
// max_tokens) and the streamed text (incremental detokenization, then the stop
// checker), so that both produce the same tokens, text and finish reason.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::engine {

class SequenceOutput {
 public:
  // `max_new` ≥ 1 tokens at most; `eos_ids` must outlive this object. Without a
  // tokenizer (a --load-format dummy model) there is no text: tokens only, and
  // stop strings are refused (fp8lm::Error).
  SequenceOutput(const tokenizer::Tokenizer* tokenizer, const SamplingParams& params,
                 std::span<const int32_t> eos_ids, int64_t max_new);

  struct Step {
    std::string text;           // final text this token made available (may be empty)
    std::string tail;           // at the end only: the text held back until then (may be empty)
    bool finished = false;
    std::string finish_reason;  // when finished: "stop" (EOS, stop token or string) or "length"
  };

  // Records the next generated token. After a finishing step, nothing more may be pushed.
  Step push(int32_t token);

  // Ends the sequence before a stop condition of its own (its structured-output grammar is
  // complete): the text held back, finished with `reason`.
  Step end(const char* reason);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  bool finished() const { return finished_; }

 private:
  const SamplingParams* params_;
  std::span<const int32_t> eos_ids_;
  int64_t max_new_;
  StopChecker stops_;
  std::optional<tokenizer::IncrementalDecoder> decoder_;
  std::vector<int32_t> tokens_;
  bool finished_ = false;

  // Ends the stream: flushes the detokenizer through the stop checker.
  void finish(Step& s);
};

}  // namespace fp8lm::engine
