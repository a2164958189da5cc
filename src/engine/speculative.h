// Speculative decoding (issue 42): a cheap drafter proposes the next tokens, the model verifies
// them all in one step of k + 1 positions, and the tokens it would have produced itself are kept.
//
// This part: vLLM's --speculative-config JSON, and the n-gram drafter ("prompt lookup": the
// tokens that followed the last earlier occurrence of the sequence's latest n-gram), and the
// verification of its drafts that engine::generate (generate.h) and the batched engine
// (engine.h) run: greedy, or speculative sampling (verify_drafted_token); the Drafter interface
// that the n-gram drafter, draft models (engine/draft_model.h) and EAGLE-3 heads
// (engine/eagle3_drafter.h) share.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"

namespace fp8lm::engine {

struct SpeculativeConfig {
  // kNgram: prompt lookup, no model. kDraftModel: a smaller model with the target's vocabulary
  // drafts greedily (engine/draft_model.h). kEagle3: an EAGLE-3 head drafts greedily from the
  // target's own hidden states (engine/eagle3_drafter.h).
  enum class Method { kNgram, kDraftModel, kEagle3 };
  Method method = Method::kNgram;
  std::string model;         // kDraftModel, kEagle3: its directory
  std::string quantization;  // kDraftModel: online quantization of the draft ("fp8", …); empty: as stored
  int num_speculative_tokens = 0;  // k: drafted tokens a step, 1 … kMaxSpeculativeTokens
  int prompt_lookup_min = 1;       // n-gram lengths tried, longest first
  int prompt_lookup_max = 1;
  // The batched engine drafts nothing in a step while this many sequences or more are running
  // (vLLM's disable_by_batch_size): at a large batch a verify step costs more than it wins.
  // 0: always drafts.
  int disable_by_batch_size = 0;
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Parses vLLM's --speculative-config JSON: {"method": "ngram", "num_speculative_tokens": k,
// "prompt_lookup_min": a, "prompt_lookup_max": b, "disable_by_batch_size": n} (as vLLM: a or b
// given alone sets both, neither gives 5), or a draft model: {"model": DIR,
// "num_speculative_tokens": k, "quantization": "fp8"} ("method": "draft_model" optional), or an
// EAGLE-3 head: {"method": "eagle3", "model": DIR, "num_speculative_tokens": k}. Throws
// fp8lm::Error naming what is wrong: not JSON, a key fp8lm does not know, a method it does not
// implement ("eagle", "mtp", …), a value out of range.
SpeculativeConfig parse_speculative_config(std::string_view json);

// The n-gram drafter: for the sequence's tokens (prompt and output so far), the longest n in
// [prompt_lookup_min, prompt_lookup_max] whose last n tokens occurred earlier in the sequence,
// and at the latest such earlier occurrence, the up to k tokens that followed it. Empty when no
// n-gram recurs. O(len · n) a call.
std::vector<int32_t> ngram_draft(std::span<const int32_t> tokens, const SpeculativeConfig& config);

// Speculative sampling of one drafted token (Leviathan et al. 2023; Chen et al. 2023) when the
// drafter is deterministic (its distribution q is one-hot on `draft`, as the n-gram drafter's):
// with the target's distribution `p` at that position (the sampler's, after every filter), the
// draft is kept when u_accept < p[draft] (min(1, p/q) = p[draft]), else the token is drawn at
// u_resample from the residual max(0, p − q) normalized: p without the draft. Either way the
// token is distributed as p. `p` sums to 1 (zeros where removed); a residual of no mass (p[draft]
// = 1 up to rounding) keeps the draft.
struct DraftVerdict {
  bool accepted = false;
  int32_t token = 0;
};
DraftVerdict verify_drafted_token(std::span<const float> p, int32_t draft, double u_accept, double u_resample);

// The tokens a verify step keeps, from the target's logits at each position of [last, draft...]
// (draft.size() + 1 rows of the vocabulary, `logits` is scratch): at each drafted position the
// sampler's distribution there (penalties as after the tokens kept before it, temperature and the
// filters; greedy: one-hot on the argmax) verifies the draft (verify_drafted_token), and the first
// rejection ends the step with the resampled token; all kept, a draw at the last position adds
// one. `sampler` is not changed (the caller accepts the tokens); `accepted` counts kept drafts.
struct VerifiedDraft {
  std::vector<int32_t> tokens;  // accepted + 1 of them
  int accepted = 0;
};
VerifiedDraft verify_draft_rows(const Sampler& sampler, std::span<float> logits, std::span<const int32_t> draft);

// Where drafts come from. The engine asks for a batch of sequences' drafts at once, and tells
// the drafter what each sequence kept (a drafter with state — a draft model's KV cache — keeps
// what is still valid) and when a sequence is gone. Drafts are deterministic (the drafter's q is
// one-hot), which verify_drafted_token assumes.
class Drafter {
 public:
  virtual ~Drafter() = default;
  struct Request {
    uint64_t id = 0;                  // the sequence's, stable while it lives
    std::span<const int32_t> tokens;  // prompt and output so far
    int max_tokens = 0;               // drafts wanted, ≥ 1
    std::vector<int32_t> draft;       // out: at most max_tokens
  };
  virtual void draft(std::span<Request> requests) = 0;
  // Sequence `id` now starts with `length` tokens the drafter saw in its last draft() call (its
  // tokens then and the drafts it kept); anything it derived from later ones is stale.
  virtual void keep(uint64_t id, int64_t length) = 0;
  virtual void release(uint64_t id) = 0;

  // A drafter that reads the target's own hidden states (EAGLE-3: reads_target_states()) sees
  // every target step once its tokens are known and before the next step runs on the backend
  // (LlamaModel::aux_states still holds that step's): each sequence of the step in row order,
  // where its rows were and what it holds now. It may draft for the next step then (drafts for
  // max_drafts > 0), which draft() hands out for a sequence whose tokens are still those.
  struct StepRows {
    uint64_t id = 0;
    int64_t start_position = 0;            // the position of its first row in the step
    int64_t rows = 0;                      // its rows in the step
    std::span<const int32_t> tokens;       // the sequence's tokens now: the step's kept ones included
    std::span<const int64_t> block_table;  // the target's, covering at least its step's positions
    int max_drafts = 0;                    // drafts wanted for its next step (0: none)
  };
  virtual bool reads_target_states() const { return false; }
  virtual void after_target_step(std::span<const StepRows> rows) { (void)rows; }
};

// Prompt lookup (ngram_draft) for each request: no state.
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const SpeculativeConfig& config) : config_(config) {}
  void draft(std::span<Request> requests) override;
  void keep(uint64_t, int64_t) override {}
  void release(uint64_t) override {}

 private:
  SpeculativeConfig config_;
};

// The drafter `config` drafts with: `given` (a loaded draft model) where there is one, else a
// new NgramDrafter that `own` keeps; a draft-model config without `given` is an internal error.
Drafter& resolve_drafter(const SpeculativeConfig& config, Drafter* given, std::unique_ptr<Drafter>& own);

// How many of `draft` the model's own greedy tokens confirm: `verified` holds the model's token
// after each position of [last, draft...] (draft.size() + 1 of them); draft[i] is accepted while
// it equals verified[i]. The step then yields verified[0 … accepted] (accepted + 1 tokens).
int accepted_prefix(std::span<const int32_t> draft, std::span<const int32_t> verified);

// Acceptance counts of a run: drafted and accepted tokens, verify steps, and per draft position
// how often it was reached and accepted (position i is reached when 0 … i − 1 were accepted).
struct SpeculativeStats {
  int64_t steps = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> reached, accepted_at;
  void add(int drafted_now, int accepted_now);
  double acceptance_rate() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
  // Tokens a verify step yields on average: accepted + 1.
  double mean_accepted_length() const { return steps > 0 ? double(accepted + steps) / double(steps) : 0.0; }
};

}  // namespace fp8lm::engine
