// Speculative decoding (issue 42): a cheap drafter proposes the next tokens, the model verifies
// them all in one step of k + 1 positions, and the tokens it would have produced itself are kept.
//
// This part: vLLM's --speculative-config JSON, and the n-gram drafter ("prompt lookup": the
// tokens that followed the last earlier occurrence of the sequence's latest n-gram). Greedy
// verification runs in engine::generate (generate.h); rejection sampling, draft models and
// EAGLE-3 heads are refused by name until they exist.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm::engine {

struct SpeculativeConfig {
  enum class Method { kNgram };
  Method method = Method::kNgram;
  int num_speculative_tokens = 0;  // k: drafted tokens a step, 1 … kMaxSpeculativeTokens
  int prompt_lookup_min = 1;       // n-gram lengths tried, longest first
  int prompt_lookup_max = 1;
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Parses vLLM's --speculative-config JSON: {"method": "ngram", "num_speculative_tokens": k,
// "prompt_lookup_min": a, "prompt_lookup_max": b} (a defaults to 1, b to a... as vLLM: a given
// alone sets both). Throws fp8lm::Error naming what is wrong: not JSON, a key fp8lm does not
// know, a method it does not implement (a draft model, "eagle3", …), a value out of range.
SpeculativeConfig parse_speculative_config(std::string_view json);

// The n-gram drafter: for the sequence's tokens (prompt and output so far), the longest n in
// [prompt_lookup_min, prompt_lookup_max] whose last n tokens occurred earlier in the sequence,
// and at the latest such earlier occurrence, the up to k tokens that followed it. Empty when no
// n-gram recurs. O(len · n) a call.
std::vector<int32_t> ngram_draft(std::span<const int32_t> tokens, const SpeculativeConfig& config);

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
