// The sampler against transformers' logits processors (fixtures by
// tools/make_sampler_fixtures.py), sampling statistics, seeds and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/sampler.h"
#include "fixtures.h"

namespace fp8lm::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// splitmix64 of state seed + (i+1)*golden: the same stream as the fixture maker.
uint64_t splitmix(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The fixture's logit recipe (see make_logits in the tool).
std::vector<float> make_logits(const nlohmann::json& spec) {
  const auto n = spec["vocab"].get<size_t>();
  const auto seed = spec["seed"].get<uint64_t>();
  const auto tie_shift = spec["tie_shift"].get<int>();
  const auto neg_inf_every = spec["neg_inf_every"].get<uint64_t>();
  const auto scale = spec["scale"].get<float>();
  std::vector<float> logits(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = splitmix(seed, 2 * i);
    const uint64_t b = splitmix(seed, 2 * i + 1);
    int64_t s = -131072;
    for (int shift = 0; shift < 64; shift += 16) s += static_cast<int64_t>((a >> shift) & 0xFFFF);
    if (tie_shift != 0) s = (s >> tie_shift) * (int64_t{1} << tie_shift);  // floor, as numpy
    logits[i] = static_cast<float>(s) * scale;
    if (neg_inf_every != 0 && b % neg_inf_every == 0) logits[i] = -kInf;
  }
  float top = -kInf;
  for (const float v : logits) top = std::max(top, v);
  for (const auto& id : spec["copy_max_to"]) logits[id.get<size_t>()] = top;
  return logits;
}

const nlohmann::json& fixture() {
  static const nlohmann::json doc = [] {
    const std::vector<uint8_t> bytes = test::read_bytes(test::fixture_path("sampler/cases.json"));
    return nlohmann::json::parse(bytes.begin(), bytes.end());
  }();
  return doc;
}

const std::vector<float>& logit_set(size_t i) {
  static std::vector<std::vector<float>> sets;
  if (sets.empty())
    for (const auto& spec : fixture()["logit_sets"]) sets.push_back(make_logits(spec));
  return sets.at(i);
}

SamplingParams params_of(const nlohmann::json& c) {
  SamplingParams p;
  p.temperature = c["temperature"].get<float>();
  p.top_k = c["top_k"].get<int32_t>();
  p.top_p = c["top_p"].get<float>();
  p.min_p = c["min_p"].get<float>();
  p.repetition_penalty = c["repetition_penalty"].get<float>();
  p.presence_penalty = c["presence_penalty"].get<float>();
  p.frequency_penalty = c["frequency_penalty"].get<float>();
  p.seed = 1;
  return p;
}

// ---- against transformers ---------------------------------------------------

TEST(SamplerVsTransformers, ProcessedDistributionsAndKeptSets) {
  const auto& cases = fixture()["cases"];
  ASSERT_GE(cases.size(), 100u);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& c = cases[ci];
    SCOPED_TRACE("case " + std::to_string(ci) + ": " + c.dump().substr(0, 200));
    const std::vector<int32_t> prompt = c["prompt"].get<std::vector<int32_t>>();
    Sampler sampler(params_of(c), prompt);
    for (const auto& t : c["output"]) sampler.accept(t.get<int32_t>());
    std::vector<float> logits = logit_set(c["logits"].get<size_t>());
    const std::vector<float> probs = sampler.probabilities(logits);

    int64_t count = 0, sum = 0, sq_sum = 0;
    double total = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
      ASSERT_FALSE(std::isnan(probs[i]));
      const bool kept = logits[i] != -kInf;
      ASSERT_EQ(kept, probs[i] > 0.0f || kept) << i;
      if (!kept) {
        ASSERT_EQ(probs[i], 0.0f);
        continue;
      }
      ++count;
      sum += static_cast<int64_t>(i);
      sq_sum += static_cast<int64_t>(i) * static_cast<int64_t>(i);
      total += probs[i];
    }
    EXPECT_EQ(count, c["kept_count"].get<int64_t>());
    // Where HF's top-p cut splits a group of equal logits, which members it
    // keeps is up to torch's unstable sort; only the count is compared then.
    if (!c.contains("top_p_tie_split")) {
      EXPECT_EQ(sum, c["kept_id_sum"].get<int64_t>());
      EXPECT_EQ(sq_sum, c["kept_id_sq_sum"].get<int64_t>());
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
    for (const auto& probe : c["probes"]) {
      const auto id = probe[0].get<size_t>();
      EXPECT_NEAR(probs[id], probe[1].get<double>(), 1e-6) << "token " << id;
      EXPECT_NE(logits[id], -kInf) << "token " << id;
    }
    if (HasFailure()) return;  // one broken case is enough to read
  }
}

TEST(SamplerVsTransformers, RawLogprobs) {
  for (const auto& entry : fixture()["logprobs"]) {
    const std::vector<float>& logits = logit_set(entry["logits"].get<size_t>());
    const std::vector<TokenLogprob> top = top_logprobs(logits, 5);
    ASSERT_EQ(top.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      // Ties among the top (logit set 4 copies its max) may list in any order in torch.
      EXPECT_NEAR(top[i].logprob, entry["top"][i][1].get<double>(), 1e-5);
      EXPECT_NEAR(logprob_of(logits, top[i].token), top[i].logprob, 1e-6);
    }
    for (const auto& at : entry["at"]) {
      const auto id = at[0].get<int32_t>();
      if (at[1].is_null()) {  // -inf
        EXPECT_EQ(logprob_of(logits, id), -kInf);
      } else {
        EXPECT_NEAR(logprob_of(logits, id), at[1].get<double>(), 1e-5);
      }
    }
  }
}

// ---- semantics by hand ------------------------------------------------------

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p, {});
  std::vector<float> logits = {1.0f, 3.0f, -kInf, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  logits = {-kInf, -kInf, 0.5f};
  EXPECT_EQ(s.sample(logits), 2);
}

TEST(Sampler, GreedySeesPenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0};
  Sampler s(p, prompt);
  std::vector<float> logits = {3.0f, 2.0f};  // 3 / 2 = 1.5 < 2
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, PenaltiesFollowOpenAiAndHf) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.temperature = 1.0f;
  const std::vector<int32_t> prompt = {0, 1};
  Sampler s(p, prompt);
  s.accept(1);
  s.accept(2);
  s.accept(2);
  std::vector<float> logits = {4.0f, -4.0f, 1.0f, 1.0f};
  s.process(logits);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);                      // prompt only: repetition
  EXPECT_FLOAT_EQ(logits[1], -8.0f - 0.25f - 0.5f);      // both: x2 (negative), then once, once
  EXPECT_FLOAT_EQ(logits[2], 0.5f - 0.5f - 0.5f);        // output twice: /2, -0.25*2, -0.5
  EXPECT_FLOAT_EQ(logits[3], 1.0f);                      // never seen
}

TEST(Sampler, SampleRecordsOutputForPenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 2.0f;
  Sampler s(p, {});
  std::vector<float> logits = {1.0f, 0.0f};
  EXPECT_EQ(s.sample(logits), 0);
  logits = {1.0f, 0.0f};  // token 0 now pays 2
  EXPECT_EQ(s.sample(logits), 1);
  EXPECT_EQ(s.num_generated(), 2);
}

TEST(Sampler, TopKKeepsTiesAtTheBoundary) {
  SamplingParams p;
  p.top_k = 2;
  Sampler s(p, {});
  std::vector<float> logits = {5.0f, 3.0f, 3.0f, 1.0f};
  const std::vector<float> probs = s.probabilities(logits);
  EXPECT_GT(probs[2], 0.0f);
  EXPECT_EQ(probs[3], 0.0f);
}

TEST(Sampler, TinyTopPKeepsTheMaximum) {
  SamplingParams p;
  p.top_p = 1e-6f;
  p.min_p = 1.0f;
  Sampler s(p, {});
  std::vector<float> logits = {0.0f, 0.1f, -kInf, 0.05f};
  const std::vector<float> probs = s.probabilities(logits);
  EXPECT_EQ(probs, (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f}));
}

TEST(Sampler, NothingSampleableIsAnError) {
  Sampler s(SamplingParams{}, {});
  std::vector<float> logits = {-kInf, -kInf};
  EXPECT_THROW(s.sample(logits), Error);
  logits = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(s.sample(logits), Error);
  std::vector<float> empty;
  EXPECT_THROW(s.sample(empty), Error);
}

// Parameters at the ends of their ranges keep finite logits finite: the result
// is the float limit, never +inf (a repetition penalty of 1e-38 used to make a
// seen token's logit +inf and the request throw). Logits that do not overflow
// are untouched by the saturation.
TEST(Sampler, PenaltiesAndTemperatureSaturateAtTheFloatRange) {
  const float big = 3.0e38f;
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1e-38f;
  const std::vector<int32_t> prompt = {1, 2};
  Sampler greedy(p, prompt);
  std::vector<float> logits = {5.0f, 4.0f, 8.0f, -1.0f};
  EXPECT_EQ(greedy.sample(logits), 1);  // 4e38 and 8e38 are both the largest float: the lower id
  p.temperature = 1e-5f;
  p.seed = 1;
  Sampler tiny_t(p, prompt);
  logits = {5.0f, 4.0f, 8.0f, -1.0f};
  tiny_t.process(logits);
  const float kMax = std::numeric_limits<float>::max();
  EXPECT_EQ(logits[1], kMax);
  EXPECT_EQ(logits[2], kMax);
  EXPECT_TRUE(std::isfinite(logits[0]) && std::isfinite(logits[3]));
  logits = {5.0f, 4.0f, 8.0f, -1.0f};
  const int32_t t = tiny_t.sample(logits);
  EXPECT_TRUE(t == 1 || t == 2) << t;
  p.repetition_penalty = 1e38f;
  const std::vector<int32_t> negative = {3};
  Sampler huge(p, negative);
  logits = {5.0f, 1.0f, 2.0f, -big};
  huge.process(logits);
  EXPECT_EQ(logits[3], -kMax);
  p = SamplingParams{};
  p.temperature = 1e-5f;
  p.frequency_penalty = -2.0f;
  Sampler freq(p, {});
  freq.accept(0);
  logits = {big, 0.0f};
  freq.process(logits);
  EXPECT_EQ(logits[0], kMax);
}

// What the backends' sample_rows do per row: a row that cannot be sampled gets
// kNoToken (its request fails), where sample() throws; bad arguments still throw.
TEST(RowSampler, SampleOrNoneRefusesOnlyTheRowsData) {
  backend::RowSampler rs;
  backend::RowSampling row;
  row.temperature = 0.0f;
  std::vector<float> logits = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(rs.sample_or_none(logits, row), backend::kNoToken);
  logits = {0.0f, kInf};
  EXPECT_EQ(rs.sample_or_none(logits, row), backend::kNoToken);
  logits = {-kInf, -kInf};
  EXPECT_EQ(rs.sample_or_none(logits, row), backend::kNoToken);
  logits = {0.0f, 1.0f};
  EXPECT_EQ(rs.sample_or_none(logits, row), 1);
  const std::vector<int32_t> outside = {7};
  row.prompt_tokens = outside;
  row.repetition_penalty = 1.5f;
  EXPECT_THROW(rs.sample_or_none(logits, row), Error);
}

TEST(Sampler, PromptTokenOutsideVocabularyIsAnError) {
  const std::vector<int32_t> prompt = {7};
  Sampler s(SamplingParams{}, prompt);
  std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(s.sample(logits), Error);
}

TEST(Sampler, LogprobsAreOfRawLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 100.0f;
  const std::vector<int32_t> prompt = {0};
  Sampler s(p, prompt);
  std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  const SampleResult r = s.sample_with_logprobs(logits, 2);
  const double lse = std::log(std::exp(2.0) + std::exp(1.0) + 1.0);
  EXPECT_EQ(r.token, 1);  // the penalty moved the choice...
  EXPECT_NEAR(r.logprob, 1.0 - lse, 1e-6);  // ...but not the reported logprob
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_NEAR(r.top[0].logprob, 2.0 - lse, 1e-6);
  EXPECT_EQ(r.top[1].token, 1);
  EXPECT_THROW(top_logprobs(logits, -1), Error);
}

// ---- seeds and statistics ---------------------------------------------------

std::vector<int32_t> draw_many(SamplingParams p, const std::vector<float>& logits, int n) {
  Sampler s(std::move(p), {});
  std::vector<int32_t> out;
  std::vector<float> scratch;
  for (int i = 0; i < n; ++i) {
    scratch = logits;
    out.push_back(s.sample(scratch));
  }
  return out;
}

TEST(SamplerSeeds, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(500);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 17) * 0.1f;
  SamplingParams p;
  p.top_p = 0.9f;
  p.seed = 42;
  const auto a = draw_many(p, logits, 200);
  const auto b = draw_many(p, logits, 200);
  p.seed = 43;
  const auto c = draw_many(p, logits, 200);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  p.seed.reset();  // random device: two samplers should not agree on 200 draws
  EXPECT_NE(draw_many(p, logits, 200), draw_many(p, logits, 200));
}

// The n-th draw's uniform is the n-th SplitMix64 output of the seed (the
// well-known first output from seed 0 pins the stream), whatever came before.
TEST(SamplerSeeds, UniformIsSplitMix64OfSeedAndDrawIndex) {
  EXPECT_EQ(splitmix(0, 0), 0xE220A8397B1DCDAFull);
  for (const uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}})
    for (const uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{1000}}) {
      const double u = backend::sampling_uniform(seed, n);
      EXPECT_EQ(u, static_cast<double>(splitmix(seed, n) >> 11) * 0x1p-53);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
    }
  SamplingParams p;
  p.seed = 9;
  Sampler a(p, {}), b(p, {});
  std::vector<float> x(50, 0.0f), y(50, 1.0f);
  a.sample(x);  // different logits and tokens before …
  b.accept(3);
  EXPECT_EQ(a.row_sampling().uniform, b.row_sampling().uniform);  // … the same second draw
  EXPECT_EQ(a.row_sampling().uniform, backend::sampling_uniform(9, 1));
}

// What the engine hands a backend (row_sampling, then accept) draws what
// sample() draws: penalties, filters and seed included, token after token.
TEST(SamplerSeeds, RowSamplingDrawsWhatSampleDraws) {
  std::vector<float> logits(300);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 101) * 0.05f;
  const std::vector<int32_t> prompt = {5, 7, 7, 250, 3};
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 60;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.2f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.1f;
  p.seed = 77;
  Sampler host(p, prompt), device(p, prompt);
  backend::RowSampler row_math;
  for (int i = 0; i < 40; ++i) {
    std::vector<float> a = logits, b = logits;
    const int32_t want = host.sample(a);
    const backend::RowSampling row = device.row_sampling();
    ASSERT_TRUE(std::is_sorted(row.output_tokens.begin(), row.output_tokens.end()));
    const int32_t got = row_math.sample(b, row);
    device.accept(got);
    ASSERT_EQ(got, want) << "draw " << i;
  }
}

// Pearson's chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<float>& probs, int64_t n) {
  double chi = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0.0f) {
      EXPECT_EQ(counts[i], 0) << "drew removed token " << i;
      continue;
    }
    const double e = static_cast<double>(n) * probs[i];
    const double d = static_cast<double>(counts[i]) - e;
    chi += d * d / e;
  }
  return chi;
}

// Fixed seeds, so the outcome is deterministic; the thresholds are the
// chi-square quantiles with tail probability 1e-9 (computed with mpmath), so
// a correct sampler with another seed would fail about once in a billion.
TEST(SamplerStatistics, FrequenciesMatchPlainSoftmax) {
  std::vector<float> logits(16);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 2.0f;
  SamplingParams p;
  p.seed = 7;
  std::vector<float> scratch = logits;
  const std::vector<float> probs = Sampler(p, {}).probabilities(scratch);
  constexpr int64_t kDraws = 100000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (const int32_t t : draw_many(p, logits, kDraws)) ++counts[static_cast<size_t>(t)];
  EXPECT_LT(chi_square(counts, probs, kDraws), 73.63);  // df = 15
}

TEST(SamplerStatistics, FrequenciesMatchFilteredDistribution) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::cos(static_cast<float>(i) * 0.37f) * 3.0f;
  SamplingParams p;
  p.seed = 11;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.7f;
  p.min_p = 0.1f;
  std::vector<float> scratch = logits;
  const std::vector<float> probs = Sampler(p, {}).probabilities(scratch);
  const auto kept = std::count_if(probs.begin(), probs.end(), [](float x) { return x > 0.0f; });
  ASSERT_EQ(kept, 28);  // the filters really cut (1000 -> 28); df = 27 below
  constexpr int64_t kDraws = 20000;
  std::vector<int64_t> counts(logits.size(), 0);
  for (const int32_t t : draw_many(p, logits, kDraws)) ++counts[static_cast<size_t>(t)];
  EXPECT_LT(chi_square(counts, probs, kDraws), 96.39);  // df = 27
}

// ---- parameters -------------------------------------------------------------

void expect_error(SamplingParams p, const std::string& name, const std::string& value) {
  try {
    p.validate();
    ADD_FAILURE() << name << " = " << value << " was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find(value), std::string::npos) << msg;
  }
  EXPECT_THROW(Sampler(p, {}), Error);
}

TEST(SamplingParamsValidation, EachBadParameterIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return p;
  };
  expect_error(with([](SamplingParams& p) { p.temperature = -0.5f; }), "temperature", "-0.5");
  expect_error(with([&](SamplingParams& p) { p.temperature = nan; }), "temperature", "nan");
  expect_error(with([](SamplingParams& p) { p.temperature = kInf; }), "temperature", "inf");
  expect_error(with([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p", "0");
  expect_error(with([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p", "1.5");
  expect_error(with([&](SamplingParams& p) { p.top_p = nan; }), "top_p", "nan");
  expect_error(with([](SamplingParams& p) { p.top_k = -2; }), "top_k", "-2");
  expect_error(with([](SamplingParams& p) { p.min_p = -0.1f; }), "min_p", "-0.1");
  expect_error(with([](SamplingParams& p) { p.min_p = 1.5f; }), "min_p", "1.5");
  expect_error(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty", "0");
  expect_error(with([&](SamplingParams& p) { p.repetition_penalty = nan; }), "repetition_penalty", "nan");
  expect_error(with([](SamplingParams& p) { p.presence_penalty = 2.5f; }), "presence_penalty", "2.5");
  expect_error(with([](SamplingParams& p) { p.frequency_penalty = -3.0f; }), "frequency_penalty", "-3");
  expect_error(with([&](SamplingParams& p) { p.frequency_penalty = nan; }), "frequency_penalty", "nan");
  expect_error(with([](SamplingParams& p) { p.max_tokens = 0; }), "max_tokens", "0");
  expect_error(with([](SamplingParams& p) { p.stop = {"ok", ""}; }), "stop", "\"\"");
  expect_error(with([](SamplingParams& p) { p.stop_token_ids = {-1}; }), "stop_token_ids", "-1");
}

TEST(SamplingParamsValidation, BoundariesAndOffValuesAreAccepted) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_tokens = 1;
  EXPECT_NO_THROW(p.validate());
  EXPECT_TRUE(p.greedy());
}

TEST(SamplingParams, StopsOnStopIdsAndEosUnlessIgnored) {
  SamplingParams p;
  p.stop_token_ids = {5};
  const std::vector<int32_t> eos = {2};
  EXPECT_TRUE(p.stops_on(5, eos));
  EXPECT_TRUE(p.stops_on(2, eos));
  EXPECT_FALSE(p.stops_on(3, eos));
  p.ignore_eos = true;
  EXPECT_FALSE(p.stops_on(2, eos));
  EXPECT_TRUE(p.stops_on(5, eos));
}

// Structured outputs' masks (backend::RowSampling::allowed): a removed id is -inf before the
// penalties, so a masked row samples as the same row with those logits at -inf — the form
// transformers' and vLLM's bitmask processors give — whatever the removed ids held (NaN included).
TEST(SamplerMask, EqualsTheRowWithRemovedIdsAtMinusInfinity) {
  const int vocab = 77;  // not a multiple of 32: the last word is partial
  std::vector<float> logits(vocab);
  for (int i = 0; i < vocab; ++i) logits[size_t(i)] = std::sin(float(i) * 1.7f) * 3.0f;
  std::vector<uint32_t> mask((vocab + 31) / 32, 0u);
  for (int i = 0; i < vocab; i += 3) mask[size_t(i) / 32] |= 1u << (i % 32);
  std::vector<float> removed = logits;
  for (int i = 0; i < vocab; ++i)
    if (i % 3 != 0) removed[size_t(i)] = -std::numeric_limits<float>::infinity();
  std::vector<float> poisoned = logits;
  poisoned[1] = std::nanf("");  // masked out: never read
  poisoned[2] = std::numeric_limits<float>::infinity();
  for (const float temperature : {0.0f, 0.7f, 1.3f})
    for (int draw = 0; draw < 20; ++draw) {
      backend::RowSampling row;
      row.temperature = temperature;
      row.top_k = 9;
      row.top_p = 0.9f;
      row.repetition_penalty = 1.2f;
      const std::vector<int32_t> seen = {0, 3, 4};
      row.prompt_tokens = seen;
      row.uniform = backend::sampling_uniform(7, uint64_t(draw));
      backend::RowSampler rs;
      std::vector<float> a = removed;
      const int32_t want = rs.sample(a, row);
      row.allowed = mask;
      std::vector<float> b = poisoned;
      EXPECT_EQ(rs.sample_or_none(b, row), want) << temperature << " " << draw;
      EXPECT_EQ(want % 3, 0);
    }
}

TEST(SamplerMask, NothingAllowedIsNoTokenAndAWrongSizeIsRefused) {
  std::vector<float> logits(40, 1.0f);
  backend::RowSampling row;
  const std::vector<uint32_t> none(2, 0u);
  row.allowed = none;
  backend::RowSampler rs;
  EXPECT_EQ(rs.sample_or_none(logits, row), backend::kNoToken);
  const std::vector<uint32_t> short_mask(1, ~0u);
  row.allowed = short_mask;
  std::vector<float> again(40, 1.0f);
  EXPECT_THROW(rs.sample(again, row), Error);
}

}  // namespace
}  // namespace fp8lm::engine
