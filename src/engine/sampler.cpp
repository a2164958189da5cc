// A request's sampling state around the shared row math (backend/sampling.h):
// parameters validated once, the penalty inputs kept sorted, and the draw
// counter that, with the seed, fixes each draw's uniform.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "common/error.h"

namespace fp8lm::engine {
namespace {


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

// log(sum(exp(logits))) in double, for log-softmax.
double log_sum_exp(std::span<const float> logits) {
  const float m = logits[static_cast<size_t>(backend::argmax_logit(logits))];
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

bool SamplingParams::greedy() const { return temperature < backend::kGreedyTemperature; }

SamplingParams with_generation_defaults(SamplingParams p, const io::GenerationDefaults& g) {
  if (g.temperature) p.temperature = float(*g.temperature);
  if (g.do_sample && !*g.do_sample) p.temperature = 0.0f;  // transformers: greedy, whatever the temperature
  if (g.top_p) p.top_p = float(*g.top_p);
  if (g.top_k) p.top_k = int32_t(*g.top_k);
  if (g.min_p) p.min_p = float(*g.min_p);
  if (g.repetition_penalty) p.repetition_penalty = float(*g.repetition_penalty);
  return p;
}

void add_eos_stops(SamplingParams& p, std::span<const int32_t> ids) {
  if (p.ignore_eos) return;
  for (const int32_t id : ids)
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), id) == p.stop_token_ids.end())
      p.stop_token_ids.push_back(id);
}

std::vector<int32_t> further_eos_ids(const std::filesystem::path& dir, std::span<const int32_t> known,
                                     std::string& warning) {
  std::vector<int32_t> ids;
  try {
    for (const int64_t id : io::read_generation_config(dir).eos_token_ids)
      if (std::find(known.begin(), known.end(), int32_t(id)) == known.end()) ids.push_back(int32_t(id));
  } catch (const Error& e) {
    warning = std::string(e.what()) + " (its EOS ids ignored)";
  }
  return ids;
}

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
    seed_ = *params_.seed;
  } else {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
}

backend::RowSampling Sampler::row_sampling() const {
  backend::RowSampling row;
  row.temperature = params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  row.min_p = params_.min_p;
  row.repetition_penalty = params_.repetition_penalty;
  row.presence_penalty = params_.presence_penalty;
  row.frequency_penalty = params_.frequency_penalty;
  row.prompt_tokens = prompt_unique_;
  row.output_tokens = output_tokens_;
  row.output_counts = output_counts_;
  row.uniform = backend::sampling_uniform(seed_, static_cast<uint64_t>(num_generated_));
  row.allowed = allowed_;
  return row;
}

double Sampler::second_uniform() const {
  // Another SplitMix64 stream: the seed moved by the golden-ratio increment's odd multiple.
  return backend::sampling_uniform(seed_ ^ 0xD1B54A32D192ED03ull, static_cast<uint64_t>(num_generated_));
}

void Sampler::process(std::span<float> logits) { row_.process(logits, row_sampling()); }

std::vector<float> Sampler::probabilities(std::span<float> logits) {
  return row_.probabilities(logits, row_sampling());
}

void Sampler::record(int32_t token) {
  const auto it = std::lower_bound(output_tokens_.begin(), output_tokens_.end(), token);
  const auto at = it - output_tokens_.begin();
  if (it != output_tokens_.end() && *it == token) {
    ++output_counts_[static_cast<size_t>(at)];
  } else {
    output_tokens_.insert(it, token);
    output_counts_.insert(output_counts_.begin() + at, 1);
  }
  ++num_generated_;
}

int32_t Sampler::sample(std::span<float> logits) {
  const int32_t token = row_.sample(logits, row_sampling());
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
  backend::check_token(token, logits.size());
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
