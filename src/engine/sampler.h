// Token sampling for one sequence: what an OpenAI request asks for (penalties,
// temperature, top-k, top-p, min-p, seed), applied in vLLM's order and checked
// against transformers' logits processors (tests/cpp/test_sampler.cpp). The
// row math is backend/sampling.h, shared with the backends' sample_rows op:
// this class keeps a request's state (its prompt and output tokens for the
// penalties, its seed and how many tokens it drew) and describes its next draw
// as a backend::RowSampling, which a backend may sample where the logits are.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/sampling.h"
#include "io/generation_config.h"

namespace fp8lm::engine {

// The sampling fields of a request. Defaults are the "off" values, so a
// default-constructed SamplingParams samples plainly from softmax(logits).
struct SamplingParams {
  float temperature = 1.0f;         // 0 (below 1e-5, as vLLM) = greedy
  int32_t top_k = 0;                // 0 or -1 = off
  float top_p = 1.0f;               // 1 = off; must be in (0, 1]
  float min_p = 0.0f;               // 0 = off; must be in [0, 1]
  float repetition_penalty = 1.0f;  // 1 = off; prompt and output tokens (HF/vLLM)
  float presence_penalty = 0.0f;    // 0 = off; output tokens only (OpenAI)
  float frequency_penalty = 0.0f;   // 0 = off; output tokens only (OpenAI)
  // Same seed => same tokens: the uniform of the n-th token drawn is
  // backend::sampling_uniform(seed, n), whatever the batch. Unset: a random seed.
  std::optional<uint64_t> seed;
  int32_t max_tokens = 16;          // OpenAI's default
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;    // stop strings (see StopChecker)
  bool ignore_eos = false;

  // Throws fp8lm::Error naming the first bad parameter and its value.
  void validate() const;
  bool greedy() const;
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  // Whether generating `token` ends the sequence: one of stop_token_ids, or
  // one of the model's EOS ids unless ignore_eos.
  bool stops_on(int32_t token, std::span<const int32_t> eos_ids) const;
};

// `p` with the sampling fields of a model's generation config (io/generation_config.h), as
// vLLM's --generation-config auto: temperature (0 where do_sample is false), top_p, top_k,
// min_p, repetition_penalty. The front-ends then put what the user gave over these.
SamplingParams with_generation_defaults(SamplingParams p, const io::GenerationDefaults& g);

// A model's further EOS ids (generation_config.json's beyond config.json's) as stop token
// ids, those not there yet, unless p.ignore_eos.
void add_eos_stops(SamplingParams& p, std::span<const int32_t> ids);

// The EOS ids of dir/generation_config.json that `known` (the runtime's) lacks. A file that
// cannot be read gives none, and `warning` says why ("… (its EOS ids ignored)").
std::vector<int32_t> further_eos_ids(const std::filesystem::path& dir, std::span<const int32_t> known,
                                     std::string& warning);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;             // of `token` under the raw logits
  std::vector<TokenLogprob> top;    // the n most likely raw tokens, best first
};

class Sampler {
 public:
  // `prompt` feeds the repetition penalty. Throws fp8lm::Error on bad params.
  Sampler(SamplingParams params, std::span<const int32_t> prompt);

  // Picks the next token and records it as output (for the penalties).
  // `logits` is used as scratch: on return it holds the processed logits.
  int32_t sample(std::span<float> logits);

  // As sample(), plus OpenAI logprobs: log-softmax of the *raw* logits (before
  // penalties and temperature) of the chosen token and of the top `top_n`.
  SampleResult sample_with_logprobs(std::span<float> logits, int32_t top_n);

  // Penalties, temperature and the filters, in place: a removed token becomes
  // -inf, so `logits` equals what transformers' processors would return.
  // Greedy keeps only the argmax. Records nothing.
  void process(std::span<float> logits);

  // process(), then the distribution sampled from (zeros where removed).
  std::vector<float> probabilities(std::span<float> logits);

  // Records a token generated without sample() (e.g. one forced by the
  // engine, or one a backend sampled from row_sampling()) so that the
  // penalties and the draw counter see it.
  void accept(int32_t token) { record(token); }

  // The next draw as the row math takes it: the parameters, the penalty
  // inputs (spans into this sampler, valid until the next sample()/accept())
  // and the uniform of draw num_generated().
  backend::RowSampling row_sampling() const;

  // Structured outputs: the tokens the next draw may take, as a bitmask over the vocabulary
  // (backend::RowSampling::allowed); empty: any. The words must outlive the draws that read them.
  void set_allowed(std::span<const uint32_t> words) { allowed_ = words; }

  // A second uniform for draw num_generated(), independent of row_sampling()'s (another stream
  // of the same seed): speculative sampling's resample after a rejected draft (speculative.h).
  double second_uniform() const;

  const SamplingParams& params() const { return params_; }
  int32_t num_generated() const { return num_generated_; }

 private:
  void record(int32_t token);

  SamplingParams params_;
  uint64_t seed_ = 0;                   // params_.seed, or a random one
  std::vector<int32_t> prompt_unique_;  // sorted, for the repetition penalty
  std::vector<int32_t> output_tokens_;  // distinct generated tokens, sorted
  std::vector<int32_t> output_counts_;  // times each was generated
  int32_t num_generated_ = 0;
  backend::RowSampler row_;             // scratch of the row math
  std::vector<float> raw_;              // raw logits kept for logprobs
  std::span<const uint32_t> allowed_;   // set_allowed's mask, or empty
};

// Log-softmax of raw logits (computed in double): one token's value, and the
// n most likely tokens, best first (equal logits: lower id first).
float logprob_of(std::span<const float> logits, int32_t token);
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);

}  // namespace fp8lm::engine
