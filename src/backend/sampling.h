// One logits row → one token, as an OpenAI request asks (penalties, temperature,
// top-k, top-p, min-p), in vLLM's order: the description a backend's
// Ops::sample_rows receives per row, and the host implementation of the row
// math, which is both the engine's sampler (engine/sampler.h) and the CPU
// backend's op, and the reference the CUDA kernel is tested against.
//
// The draw is an inverse CDF over the surviving tokens in token-id order with
// a uniform the caller supplies. The engine derives that uniform from the
// request's seed and the index of the token drawn (sampling_uniform): a pure
// function of the two, so a request's tokens do not depend on what it is
// batched with, nor on which backend samples (up to float rounding where u is
// within it of a CDF boundary; tests/cuda/test_cuda_sampling.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp8lm::backend {

// vLLM treats temperatures below this as greedy (dividing by them overflows).
inline constexpr float kGreedyTemperature = 1e-5f;

// The token sample_rows / argmax_rows give a row that cannot be sampled (a NaN or
// +inf logit, or every logit -inf): the row's request fails, the batch goes on.
inline constexpr int32_t kNoToken = -1;
inline constexpr const char* kNoTokenReason =
    "no token can be sampled: a logit is NaN or +inf, or every logit is -inf after penalties and temperature";

// A finite logit through a penalty or the temperature stays finite: a result
// beyond the float range is the largest float of its sign (the limit of the
// arithmetic, so that any parameter in range and any logit give a defined
// draw; a tiny repetition_penalty makes the seen tokens the likeliest rather
// than +inf). NaN passes through. The CUDA kernel saturates alike.
inline float saturate_logit(float v) {
  constexpr float kMax = 3.40282347e+38f;
  return v > kMax ? kMax : v < -kMax ? -kMax : v;
}

struct RowSampling {
  float temperature = 1.0f;         // < kGreedyTemperature: greedy (argmax after the penalties)
  int32_t top_k = 0;                // ≤ 0: off
  float top_p = 1.0f;               // ≥ 1: off
  float min_p = 0.0f;               // ≤ 0: off
  float repetition_penalty = 1.0f;  // 1: off; prompt and output tokens (HF/vLLM)
  float presence_penalty = 0.0f;    // 0: off; output tokens only (OpenAI)
  float frequency_penalty = 0.0f;   // 0: off; output tokens only (OpenAI)
  // The request's distinct prompt tokens, ascending (the repetition penalty).
  std::span<const int32_t> prompt_tokens;
  // Its distinct output tokens so far, ascending, and how often each was generated.
  std::span<const int32_t> output_tokens;
  std::span<const int32_t> output_counts;
  // The uniform of this draw, in [0, 1); unused by greedy rows.
  double uniform = 0.0;
  // Structured outputs: empty, or the tokens a grammar allows next as a bitmask — bit (id % 32)
  // of word id / 32, (vocab + 31) / 32 words — and every other token's logit is -inf before
  // anything else (vLLM's order), so that even a greedy row picks an allowed token.
  std::span<const uint32_t> allowed;

  bool greedy() const { return temperature < kGreedyTemperature; }
  bool penalized() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

// Throws fp8lm::Error naming the token unless 0 <= token < vocab.
void check_token(int32_t token, size_t vocab);
// The index of the largest logit, the lower id on ties (as torch.argmax); throws
// fp8lm::Error on a NaN logit or when every logit is -inf.
int32_t argmax_logit(std::span<const float> logits);

// The n-th output (n = 0, 1, …) of SplitMix64 started at `seed`, as a 53-bit
// double in [0, 1). Counter-based: any draw of a stream is computed alone.
double sampling_uniform(uint64_t seed, uint64_t n);

// The host row math. Holds only scratch, reused across rows and calls (no
// allocation per token once warm); one per thread.
class RowSampler {
 public:
  // Penalties, temperature and the filters, in place: a removed token becomes
  // -inf, so `logits` equals what transformers' processors would return;
  // greedy leaves only the argmax (logit 0, every other -inf). Throws
  // fp8lm::Error for an empty row, a NaN, +inf, every logit -inf, or a
  // penalty token outside the row.
  void process(std::span<float> logits, const RowSampling& row);
  // The ids still in play after process(), ascending.
  std::span<const int32_t> candidates() const { return candidates_; }
  // process(), then the distribution drawn from (zeros where removed).
  std::vector<float> probabilities(std::span<float> logits, const RowSampling& row);
  // process(), then the token: the argmax for a greedy row, else the inverse
  // CDF in id order at row.uniform. `logits` is scratch.
  int32_t sample(std::span<float> logits, const RowSampling& row);
  // sample(), but kNoToken for a row whose logits cannot be sampled (the
  // backends' sample_rows: one bad row fails its request, not the batch).
  int32_t sample_or_none(std::span<float> logits, const RowSampling& row);

 private:
  void apply_mask(std::span<float> logits, const RowSampling& row) const;
  void apply_penalties(std::span<float> logits, const RowSampling& row) const;
  void collect_candidates(std::span<const float> logits);
  void filter_top_k(std::span<float> logits, int32_t top_k);
  void filter_top_p(std::span<float> logits, float top_p);
  void filter_min_p(std::span<float> logits, float min_p);
  void softmax_candidates(std::span<const float> logits);
  int32_t draw(double u) const;

  std::vector<int32_t> candidates_;  // ids still in play, ascending
  std::vector<float> probs_;         // softmax over candidates_, same order
  std::vector<int32_t> order_;       // partial sorts
  std::vector<uint8_t> keep_;        // top-p survivors
};

}  // namespace fp8lm::backend
