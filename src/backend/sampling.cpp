// The row math. Order, as vLLM: penalties -> temperature -> top-k -> top-p ->
// min-p -> draw. Each filter works on `candidates_` (the ids still in play,
// kept ascending) rather than the whole vocabulary, and none sorts more than
// it must: top-k is one nth_element, top-p partially sorts only the head that
// holds its mass. Every filter keeps the most likely token, so the
// distribution drawn from is never empty and never NaN.
#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

#include "common/error.h"

namespace fp8lm::backend {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string show(float v) {
  std::ostringstream out;
  out.precision(9);
  out << v;
  return out.str();
}

// Drops candidates for which keep() is false, writing -inf into their logits.
// The survivors keep their (ascending) order.
template <typename Keep>
void prune(std::vector<int32_t>& candidates, std::span<float> logits, Keep keep) {
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

}  // namespace

void check_token(int32_t token, size_t vocab) {
  if (token < 0 || static_cast<size_t>(token) >= vocab)
    throw Error("token id " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(vocab));
}

int32_t argmax_logit(std::span<const float> logits) {
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


// The n-th output of SplitMix64 (Steele, Lea, Flood 2014) from state `seed`:
// the state advances by the golden-ratio increment, and each output is that
// state through the finalizer, so output n needs no earlier one.
double sampling_uniform(uint64_t seed, uint64_t n) {
  uint64_t z = seed + (n + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

void RowSampler::apply_mask(std::span<float> logits, const RowSampling& row) const {
  if (row.allowed.empty()) return;
  if (row.allowed.size() != (logits.size() + 31) / 32)
    throw Error("sampling: an allowed-token mask of " + std::to_string(row.allowed.size()) + " words for " +
                std::to_string(logits.size()) + " logits");
  for (size_t w = 0; w < row.allowed.size(); ++w) {
    const uint32_t bits = row.allowed[w];
    if (bits == ~0u) continue;
    const size_t end = std::min(logits.size(), w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i)
      if (!((bits >> (i % 32)) & 1u)) logits[i] = kNegInf;
  }
}

void RowSampler::apply_penalties(std::span<float> logits, const RowSampling& row) const {
  const float rep = row.repetition_penalty;
  const float freq = row.frequency_penalty;
  const float pres = row.presence_penalty;
  if (row.output_counts.size() != row.output_tokens.size())
    throw Error("sampling: " + std::to_string(row.output_tokens.size()) + " output tokens but " +
                std::to_string(row.output_counts.size()) + " counts");
  for (const int32_t t : row.prompt_tokens) check_token(t, logits.size());
  for (const int32_t t : row.output_tokens) check_token(t, logits.size());
  // HF and vLLM: a positive logit is divided, any other multiplied, so the
  // penalty always makes a seen token less likely.
  auto repeat = [&](int32_t token) {
    float& x = logits[static_cast<size_t>(token)];
    if (std::isfinite(x)) x = saturate_logit(x > 0.0f ? x / rep : x * rep);
  };
  if (rep != 1.0f) {
    for (const int32_t t : row.prompt_tokens) repeat(t);
    for (const int32_t t : row.output_tokens)
      if (!std::binary_search(row.prompt_tokens.begin(), row.prompt_tokens.end(), t)) repeat(t);
  }
  // OpenAI: only generated tokens, frequency by count then presence once (the
  // float operations in vLLM's order, so the results match bit for bit).
  if (freq != 0.0f || pres != 0.0f) {
    for (size_t i = 0; i < row.output_tokens.size(); ++i) {
      float& x = logits[static_cast<size_t>(row.output_tokens[i])];
      if (!std::isfinite(x)) continue;
      x -= freq * static_cast<float>(row.output_counts[i]);
      x = saturate_logit(x - pres);
    }
  }
}

void RowSampler::collect_candidates(std::span<const float> logits) {
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v == kNegInf) continue;
    if (!std::isfinite(v))
      throw Error("logit of token " + std::to_string(i) + " is " + show(v) + " after penalties and temperature");
    candidates_.push_back(static_cast<int32_t>(i));
  }
  if (candidates_.empty()) throw Error("every logit is -inf: no token can be sampled");
}

void RowSampler::softmax_candidates(std::span<const float> logits) {
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
void RowSampler::filter_top_k(std::span<float> logits, int32_t top_k) {
  const auto k = static_cast<size_t>(top_k);
  if (top_k <= 0 || k >= candidates_.size()) return;
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
void RowSampler::filter_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f) return;
  softmax_candidates(logits);
  const size_t n = candidates_.size();
  double total = 0.0;
  for (const float p : probs_) total += p;
  const auto threshold = static_cast<float>(1.0 - static_cast<double>(top_p));
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
  keep_.assign(n, 0);
  for (size_t i = 0; i < cut; ++i) keep_[static_cast<size_t>(order_[i])] = 1;
  prune(candidates_, logits, [&](size_t i) { return keep_[i] != 0; });
}

// Remove tokens whose probability is below min_p times the largest one; the
// largest always stays (min_p <= 1).
void RowSampler::filter_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  softmax_candidates(logits);
  const float top = *std::max_element(probs_.begin(), probs_.end());
  const float floor = min_p * top;
  prune(candidates_, logits, [&](size_t i) { return !(probs_[i] < floor); });
}

void RowSampler::process(std::span<float> logits, const RowSampling& row) {
  if (logits.empty()) throw Error("cannot sample from an empty vocabulary");
  apply_mask(logits, row);
  apply_penalties(logits, row);
  if (row.greedy()) {
    const int32_t best = argmax_logit(logits);
    std::fill(logits.begin(), logits.end(), kNegInf);
    logits[static_cast<size_t>(best)] = 0.0f;
    candidates_.assign(1, best);
    return;
  }
  if (row.temperature != 1.0f)
    for (float& x : logits)
      if (std::isfinite(x)) x = saturate_logit(x / row.temperature);
  collect_candidates(logits);
  filter_top_k(logits, row.top_k);
  filter_top_p(logits, row.top_p);
  filter_min_p(logits, row.min_p);
}

std::vector<float> RowSampler::probabilities(std::span<float> logits, const RowSampling& row) {
  process(logits, row);
  softmax_candidates(logits);
  std::vector<float> dense(logits.size(), 0.0f);
  for (size_t i = 0; i < candidates_.size(); ++i) dense[static_cast<size_t>(candidates_[i])] = probs_[i];
  return dense;
}

// Inverse CDF over the candidates in id order: the first whose inclusive
// cumulative probability exceeds u × total (sums in double).
int32_t RowSampler::draw(double u) const {
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

int32_t RowSampler::sample(std::span<float> logits, const RowSampling& row) {
  process(logits, row);
  if (row.greedy()) return candidates_.front();
  if (!(row.uniform >= 0.0 && row.uniform < 1.0))
    throw Error("sampling: the uniform " + std::to_string(row.uniform) + " is outside [0, 1)");
  softmax_candidates(logits);
  return draw(row.uniform);
}

int32_t RowSampler::sample_or_none(std::span<float> logits, const RowSampling& row) {
  // The row's own data at fault: a NaN or +inf logit, or none above -inf. The
  // penalties and the temperature keep finite logits finite (saturate_logit),
  // so nothing else of the row can fail; what still throws (a bad uniform, a
  // penalty token outside the vocabulary) is the caller's bug. A token the row's mask removes
  // counts for nothing, whatever its logit.
  apply_mask(logits, row);
  bool any = false;
  for (const float v : logits) {
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) return kNoToken;
    any = any || v != kNegInf;
  }
  return any ? sample(logits, row) : kNoToken;
}

}  // namespace fp8lm::backend
