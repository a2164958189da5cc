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
#include "engine/speculative.h"

namespace fp8lm::structured {
class CompiledGrammar;
}  // namespace fp8lm::structured

namespace fp8lm::engine {

struct GenerationResult {
  std::vector<int32_t> tokens;   // generated ids (a stop token included, as OpenAI counts it)
  std::string text;              // the streamed text, stop string excluded
  std::string finish_reason;     // "stop" (EOS, stop token or string) or "length"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0.0;  // the prompt's forward pass and the first token
  double decode_seconds = 0.0;   // every later token
  SpeculativeStats speculative;  // drafted and accepted tokens, where speculation ran
};

// Generates for `prompt` with `params` (max_tokens is capped by the context).
// `on_text` receives each piece of final text. Throws fp8lm::Error when the
// prompt is empty or does not leave room for one token in the context, or
// when the KV cache cannot hold the sequence.
//
// With `speculative`, each decode step feeds the last token and the drafter's tokens
// (speculative.h: the n-gram drafter, or `drafter` — a draft model, engine/draft_model.h, or an
// EAGLE-3 head, engine/eagle3_drafter.h, which the caller loaded for a kDraftModel or kEagle3
// config and which sees every step once its tokens are kept) as one step of k + 1 positions and keeps what the
// model itself would give: plain greedy, the drafted tokens its argmax confirms, then its token
// after them; otherwise each drafted token kept or replaced by speculative sampling
// (verify_drafted_token, penalties counted as after the tokens kept before it), and a draw after
// the last one when all are kept — the tokens are distributed as without speculation (the same
// seed gives other tokens: the draws differ). The K/V the step wrote for rejected positions is
// overwritten by the next step, which starts right after the kept ones.
//
// With `grammar` (structured outputs; not with `speculative`: fp8lm::Error), every token is drawn
// from those the grammar allows next, and the text ends with a stop token once it is complete
// (or at max_tokens / a stop string), as the engine's constrained requests.
GenerationResult generate(Runtime& runtime, std::span<const int32_t> prompt, const SamplingParams& params,
                          const std::function<void(std::string_view)>& on_text = {},
                          const SpeculativeConfig* speculative = nullptr, Drafter* drafter = nullptr,
                          std::shared_ptr<const structured::CompiledGrammar> grammar = nullptr);

}  // namespace fp8lm::engine
