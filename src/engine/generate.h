// Generation of one sequence: prefill the prompt, then decode token by token
// with the sampler, streaming text that is final (UTF-8 complete, clear of any
// stop string) as it appears.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime.h"
#include "engine/sampler.h"

namespace fp8lm::engine {

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated ids (a stop token included, as OpenAI counts it)
  std::string text;              // the streamed text, stop string excluded
  std::string finish_reason;     // "stop" (EOS, stop token or string) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0.0;  // the prompt's forward pass and the first token
  double decode_seconds = 0.0;   // every later token
};

// Generates for `prompt` with `params` (max_tokens is capped by the context).
// `on_text` receives each piece of final text. Throws fp8lm::Error when the
// prompt is empty or does not leave room for one token in the context, or
// when the KV cache cannot hold the sequence.
GenerationResult generate(Runtime& runtime, std::span<const int32_t> prompt, const SamplingParams& params,
                          const std::function<void(std::string_view)>& on_text = {});

}  // namespace fp8lm::engine
