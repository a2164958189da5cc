// The sampling pipeline. Order, as vLLM: penalties -> temperature -> top-k ->
// top-p -> min-p -> draw. Each filter works on `candidates_` (the ids still in
// play) rather than the whole vocabulary, and none sorts more than it must:
// top-k is one nth_element, top-p partially sorts only the head that holds
// its mass. Every filter keeps the most likely token, so the distribution
// drawn from is never empty and never NaN.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "common/error.h"

namespace fp8lm::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// vLLM treats temperatures below this as greedy (dividing by them overflows).
constexpr float kGreedyBelow = 1e-5f;

template <typename T>
std::string show(T v) {
  std::ostringstream out;
  out.precision(9);
  out << v;
  return out.str();
}

[[noreturn]] void bad(const std::string& name, const std::string& rule, const std::string& value) {
  throw Error("sampling parameter " + name + " " + rule + " (got " + value + ")");
}

// Written as !(in range) so that NaN fails every check.
void check_range(const char* name, float v, float lo, float hi, bool lo_open) {
  const bool ok = (lo_open ? v > lo : v >= lo) && v <= hi;
  if (!ok) bad(name, std::string("must be in ") + (lo_open ? "(" : "[") + show(lo) + ", " + show(hi) + "]", show(v));
}

void check_token(int32_t token, size_t vocab) {
  if (token < 0 || static_cast<size_t>(token) >= vocab)
    throw Error("token id " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(vocab));
}

// Ties go to the lower id, as torch.argmax.
int32_t argmax(std::span<const float> logits) {
  int32_t best = -1;
  float best_value = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v)) throw Error("logit of token " + std::to_string(i) + " is NaN");
    if (v > best_value) {
      best_value = v;
      best = static_cast<int32_t>(i);
    }
  }
  if (best < 0) throw Error("every logit is -inf: no token can be sampled");
  return best;
}

// log(sum(exp(logits))) in double, for log-softmax.
double log_sum_exp(std::span<const float> logits) {
  const float m = logits[static_cast<size_t>(argmax(logits))];
  if (std::isinf(m)) throw Error("logits contain +inf");
  double sum = 0.0;
  for (const float v : logits) sum += std::exp(static_cast<double>(v) - static_cast<double>(m));
  return static_cast<double>(m) + std::log(sum);
}

}  // namespace

// ---- SamplingParams -----------------------------------------------------------

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || std::isinf(temperature)) bad("temperature", "must be a finite number >= 0", show(temperature));
  if (top_k < -1) bad("top_k", "must be -1 or 0 (off) or a positive count", show(top_k));
  check_range("top_p", top_p, 0.0f, 1.0f, /*lo_open=*/true);
  check_range("min_p", min_p, 0.0f, 1.0f, false);
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty))
    bad("repetition_penalty", "must be a finite number > 0", show(repetition_penalty));
  check_range("presence_penalty", presence_penalty, -2.0f, 2.0f, false);
  check_range("frequency_penalty", frequency_penalty, -2.0f, 2.0f, false);
  if (max_tokens < 1) bad("max_tokens", "must be at least 1", show(max_tokens));
  for (const int32_t id : stop_token_ids)
    if (id < 0) bad("stop_token_ids", "must hold token ids >= 0", show(id));
  for (const std::string& s : stop)
    if (s.empty()) bad("stop", "must not hold an empty string", "\"\"");
}

bool SamplingParams::greedy() const { return temperature < kGreedyBelow; }

bool SamplingParams::stops_on(int32_t token, std::span<const int32_t> eos_ids) const {
  if (std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end()) return true;
  return !ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
}

// ---- Sampler ------------------------------------------------------------------

Sampler::Sampler(SamplingParams params, std::span<const int32_t> prompt) : params_(std::move(params)) {
  params_.validate();
  prompt_unique_.assign(prompt.begin(), prompt.end());
  std::sort(prompt_unique_.begin(), prompt_unique_.end());
  prompt_unique_.erase(std::unique(prompt_unique_.begin(), prompt_unique_.end()), prompt_unique_.end());
  if (!prompt_unique_.empty() && prompt_unique_.front() < 0)
    throw Error("prompt token id " + std::to_string(prompt_unique_.front()) + " is negative");
  if (params_.seed) {
    rng_.seed(*params_.seed);
  } else {
    std::random_device device;
    rng_.seed((static_cast<uint64_t>(device()) << 32) ^ device());
  }
}

void Sampler::apply_penalties(std::span<float> logits) const {
  const float rep = params_.repetition_penalty;
  const float freq = params_.frequency_penalty;
  const float pres = params_.presence_penalty;
  // HF and vLLM: a positive logit is divided, any other multiplied, so the
  // penalty always makes a seen token less likely.
  auto repeat = [&](int32_t token) {
    float& x = logits[static_cast<size_t>(token)];
    x = x > 0.0f ? x / rep : x * rep;
  };
  for (const int32_t t : prompt_unique_) check_token(t, logits.size());
  for (const auto& [t, count] : output_counts_) check_token(t, logits.size());
  if (rep != 1.0f) {
    for (const int32_t t : prompt_unique_) repeat(t);
    for (const auto& [t, count] : output_counts_)
      if (!std::binary_search(prompt_unique_.begin(), prompt_unique_.end(), t)) repeat(t);
  }
  // OpenAI: only generated tokens, frequency by count then presence once (the
  // float operations in vLLM's order, so the results match bit for bit).
  if (freq != 0.0f || pres != 0.0f) {
    for (const auto& [t, count] : output_counts_) {
      float& x = logits[static_cast<size_t>(t)];
      x -= freq * static_cast<float>(count);
      x -= pres;
    }
  }
}

void Sampler::collect_candidates(std::span<const float> logits) {
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v == kNegInf) continue;
    if (!std::isfinite(v)) throw Error("logit of token " + std::to_string(i) + " is " + show(v) + " after penalties and temperature");
    candidates_.push_back(static_cast<int32_t>(i));
  }
  if (candidates_.empty()) throw Error("every logit is -inf: no token can be sampled");
}

// Drops candidates for which keep() is false, writing -inf into their logits.
template <typename Keep>
static void prune(std::vector<int32_t>& candidates, std::span<float> logits, Keep keep) {
  size_t out = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (keep(i)) {
      candidates[out++] = candidates[i];
    } else {
      logits[static_cast<size_t>(candidates[i])] = kNegInf;
    }
  }
  candidates.resize(out);
}

void Sampler::softmax_candidates(std::span<const float> logits) {
  float m = kNegInf;
  for (const int32_t c : candidates_) m = std::max(m, logits[static_cast<size_t>(c)]);
  probs_.resize(candidates_.size());
  double sum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs_[i] = std::exp(logits[static_cast<size_t>(candidates_[i])] - m);
    sum += probs_[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& p : probs_) p *= inv;
}

// HF / vLLM: every token whose logit is >= the k-th largest survives, so ties
// at the boundary all stay (k is a floor, not an exact count).
void Sampler::filter_top_k(std::span<float> logits) {
  const auto k = static_cast<size_t>(params_.top_k);
  if (params_.top_k <= 0 || k >= candidates_.size()) return;
  probs_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) probs_[i] = logits[static_cast<size_t>(candidates_[i])];
  std::nth_element(probs_.begin(), probs_.begin() + static_cast<std::ptrdiff_t>(k - 1), probs_.end(), std::greater<>());
  const float kth = probs_[k - 1];
  prune(candidates_, logits, [&](size_t i) { return logits[static_cast<size_t>(candidates_[i])] >= kth; });
}

// HF's rule (vLLM's is the same): sort ascending (stable, so equal logits in
// id order), remove every token whose inclusive cumulative probability is
// <= 1 - top_p, but never the most likely one. Walking the same order from
// the top instead, a token's ascending cumulative sum is total - (mass above
// it), so the survivors are a head of the descending order, and only that
// head needs sorting: partial sorts of growing size until the cut is found.
void Sampler::filter_top_p(std::span<float> logits) {
  if (params_.top_p >= 1.0f) return;
  softmax_candidates(logits);
  const size_t n = candidates_.size();
  double total = 0.0;
  for (const float p : probs_) total += p;
  const auto threshold = static_cast<float>(1.0 - static_cast<double>(params_.top_p));
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  // Descending logit; equal logits in descending id (the reverse of a stable
  // ascending sort).
  auto before = [&](int32_t a, int32_t b) {
    const float va = logits[static_cast<size_t>(candidates_[static_cast<size_t>(a)])];
    const float vb = logits[static_cast<size_t>(candidates_[static_cast<size_t>(b)])];
    return va != vb ? va > vb : candidates_[static_cast<size_t>(a)] > candidates_[static_cast<size_t>(b)];
  };
  size_t head = std::min<size_t>(n, 64);
  size_t cut = n;
  for (;;) {
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(head), order_.end(), before);
    double above = 0.0;
    size_t i = 0;
    for (; i < head; ++i) {
      if (i > 0 && !(static_cast<float>(total - above) > threshold)) break;
      above += probs_[static_cast<size_t>(order_[i])];
    }
    if (i < head || head == n) {
      cut = i;
      break;
    }
    head = std::min(n, head * 4);
  }
  if (cut == n) return;
  std::vector<uint8_t>& keep = keep_;
  keep.assign(n, 0);
  for (size_t i = 0; i < cut; ++i) keep[static_cast<size_t>(order_[i])] = 1;
  prune(candidates_, logits, [&](size_t i) { return keep[i] != 0; });
}

// Remove tokens whose probability is below min_p times the largest one; the
// largest always stays (min_p <= 1).
void Sampler::filter_min_p(std::span<float> logits) {
  if (params_.min_p <= 0.0f) return;
  softmax_candidates(logits);
  const float top = *std::max_element(probs_.begin(), probs_.end());
  const float floor = params_.min_p * top;
  prune(candidates_, logits, [&](size_t i) { return !(probs_[i] < floor); });
}

void Sampler::process(std::span<float> logits) {
  if (logits.empty()) throw Error("cannot sample from an empty vocabulary");
  apply_penalties(logits);
  if (params_.greedy()) {
    const int32_t best = argmax(logits);
    std::fill(logits.begin(), logits.end(), kNegInf);
    logits[static_cast<size_t>(best)] = 0.0f;
    candidates_.assign(1, best);
    return;
  }
  if (params_.temperature != 1.0f)
    for (float& x : logits) x /= params_.temperature;
  collect_candidates(logits);
  filter_top_k(logits);
  filter_top_p(logits);
  filter_min_p(logits);
}

std::vector<float> Sampler::probabilities(std::span<float> logits) {
  process(logits);
  softmax_candidates(logits);
  std::vector<float> dense(logits.size(), 0.0f);
  for (size_t i = 0; i < candidates_.size(); ++i) dense[static_cast<size_t>(candidates_[i])] = probs_[i];
  return dense;
}

// Inverse CDF over the candidates with a 53-bit uniform: the stream of
// mt19937_64 is fixed by the standard, so a seed gives the same tokens on
// every platform (std::uniform_real_distribution would not promise that).
int32_t Sampler::draw() {
  const double u = static_cast<double>(rng_() >> 11) * 0x1p-53;
  double total = 0.0;
  for (const float p : probs_) total += p;
  const double target = u * total;
  double acc = 0.0;
  int32_t last_nonzero = candidates_.front();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (probs_[i] <= 0.0f) continue;
    acc += probs_[i];
    last_nonzero = candidates_[i];
    if (acc > target) return candidates_[i];
  }
  return last_nonzero;  // only reached through rounding in the last bits
}

void Sampler::record(int32_t token) {
  ++output_counts_[token];
  ++num_generated_;
}

int32_t Sampler::sample(std::span<float> logits) {
  process(logits);
  int32_t token = candidates_.front();
  if (!params_.greedy()) {
    softmax_candidates(logits);
    token = draw();
  }
  record(token);
  return token;
}

SampleResult Sampler::sample_with_logprobs(std::span<float> logits, int32_t top_n) {
  SampleResult result;
  result.top = top_logprobs(logits, top_n);
  raw_.assign(logits.begin(), logits.end());
  result.token = sample(logits);
  result.logprob = logprob_of(raw_, result.token);
  return result;
}

// ---- logprobs -----------------------------------------------------------------

float logprob_of(std::span<const float> logits, int32_t token) {
  check_token(token, logits.size());
  return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - log_sum_exp(logits));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  if (n < 0) bad("logprobs", "must be >= 0", show(n));
  if (n == 0) return {};
  const double lse = log_sum_exp(logits);
  const size_t count = std::min(static_cast<size_t>(n), logits.size());
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(), [&](int32_t a, int32_t b) {
    const float va = logits[static_cast<size_t>(a)];
    const float vb = logits[static_cast<size_t>(b)];
    return va != vb ? va > vb : a < b;
  });
  std::vector<TokenLogprob> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = {ids[i], static_cast<float>(static_cast<double>(logits[static_cast<size_t>(ids[i])]) - lse)};
  return out;
}

}  // namespace fp8lm::engine
