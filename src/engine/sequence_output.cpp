#include "engine/sequence_output.h"

#include "common/error.h"

namespace fp8lm::engine {

SequenceOutput::SequenceOutput(const tokenizer::Tokenizer* tokenizer, const SamplingParams& params,
                               std::span<const int32_t> eos_ids, int64_t max_new)
    : params_(&params), eos_ids_(eos_ids), max_new_(max_new), stops_(params.stop) {
  if (tokenizer != nullptr) decoder_.emplace(tokenizer->incremental_decoder(/*skip_special_tokens=*/true));
  else if (!params.stop.empty())
    throw Error("stop strings need the model's tokenizer, and this model has none (--load-format dummy)");
}

SequenceOutput::Step SequenceOutput::push(int32_t token) {
  if (finished_) throw Error("internal: a token pushed after the sequence finished");
  Step s;
  tokens_.push_back(token);
  if (params_->stops_on(token, eos_ids_)) {
    s.finish_reason = "stop";  // the stop token is counted, never detokenized
  } else {
    StopChecker::Step c = stops_.push(decoder_ ? decoder_->push(uint32_t(token)) : std::string());
    s.text = std::move(c.text);
    if (c.stopped) s.finish_reason = "stop";
    else if (int64_t(tokens_.size()) >= max_new_) s.finish_reason = "length";
  }
  if (!s.finish_reason.empty()) finish(s);
  return s;
}

SequenceOutput::Step SequenceOutput::end(const char* reason) {
  if (finished_) throw Error("internal: a sequence ended after it finished");
  Step s;
  s.finish_reason = reason;
  finish(s);
  return s;
}

void SequenceOutput::finish(Step& s) {
  finished_ = true;
  s.finished = true;
  if (stops_.stopped()) return;
  const StopChecker::Step c = stops_.push(decoder_ ? decoder_->finish() : std::string());
  s.tail = c.text;
  if (c.stopped) s.finish_reason = "stop";
  else s.tail += stops_.finish();
}

}  // namespace fp8lm::engine
