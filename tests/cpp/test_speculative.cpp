// Speculative decoding's pieces (src/engine/speculative.h): vLLM's --speculative-config JSON and
// what fp8lm refuses of it by name, the n-gram drafter, the accepted prefix, the counts, and that
// speculative sampling keeps the target's distribution.
// Greedy generation with speculation against transformers' tokens: test_generate.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/sampling.h"
#include "common/error.h"
#include "engine/speculative.h"

namespace fp8lm::engine {
namespace {

void expect_refused(const std::string& json, const std::string& words) {
  try {
    (void)parse_speculative_config(json);
    ADD_FAILURE() << json << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(SpeculativeConfig, ParsesVllmsNgramConfig) {
  const SpeculativeConfig c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5})");
  EXPECT_EQ(c.num_speculative_tokens, 4);
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  // vLLM's defaults: neither bound given, both 5; one given, the other the same.
  const SpeculativeConfig d = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  EXPECT_EQ(d.prompt_lookup_min, 5);
  EXPECT_EQ(d.prompt_lookup_max, 5);
  const SpeculativeConfig e =
      parse_speculative_config(R"({"method": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  EXPECT_EQ(e.prompt_lookup_min, 4);
  EXPECT_EQ(e.prompt_lookup_max, 4);
  EXPECT_EQ(e.disable_by_batch_size, 0);
  EXPECT_EQ(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 8})")
                .disable_by_batch_size,
            8);
}

TEST(SpeculativeConfig, ParsesADraftModel) {
  // vLLM: a "model" without a method is a draft model.
  const SpeculativeConfig c =
      parse_speculative_config(R"({"model": "draft/dir", "num_speculative_tokens": 5, "quantization": "fp8"})");
  EXPECT_EQ(c.method, SpeculativeConfig::Method::kDraftModel);
  EXPECT_EQ(c.model, "draft/dir");
  EXPECT_EQ(c.quantization, "fp8");
  EXPECT_EQ(c.num_speculative_tokens, 5);
  EXPECT_EQ(parse_speculative_config(R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 2})").method,
            SpeculativeConfig::Method::kDraftModel);
}

TEST(SpeculativeConfig, ParsesAnEagle3Head) {
  const SpeculativeConfig c =
      parse_speculative_config(R"({"method": "eagle3", "model": "head/dir", "num_speculative_tokens": 4})");
  EXPECT_EQ(c.method, SpeculativeConfig::Method::kEagle3);
  EXPECT_EQ(c.model, "head/dir");
  EXPECT_EQ(c.num_speculative_tokens, 4);
}

TEST(SpeculativeConfig, RefusesWhatItDoesNotImplementByName) {
  expect_refused("{not json", "not valid JSON");
  // Nesting beyond io::kMaxJsonDepth is refused while parsing, in bounded stack.
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": )" + std::string(100000, '[') +
                     std::string(100000, ']') + "}",
                 "nests arrays and objects");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": ")" + std::string(5000, 'x') + "\"}",
                 "must be an integer, got \"xxxxxxxx");
  expect_refused("[1, 2]", "expected a JSON object");
  expect_refused(R"({"num_speculative_tokens": 3})", "\"method\" is missing");
  expect_refused(R"({"method": "eagle", "model": "x", "num_speculative_tokens": 3})",
                 "method \"eagle\" is not implemented");
  expect_refused(R"({"method": "eagle3", "model": "x", "num_speculative_tokens": 3, "quantization": "fp8"})",
                 "\"quantization\" with method \"eagle3\"");
  expect_refused(R"({"method": "eagle3", "model": "x", "num_speculative_tokens": 3, "prompt_lookup_min": 2})",
                 "an EAGLE-3 head takes none");
  expect_refused(R"({"method": "ngram", "model": "x", "num_speculative_tokens": 3})", "prompt lookup uses no model");
  expect_refused(R"({"method": "draft_model", "num_speculative_tokens": 3})", "needs \"model\"");
  expect_refused(R"({"model": "x", "num_speculative_tokens": 3, "prompt_lookup_max": 2})", "a draft model takes none");
  expect_refused(R"({"model": 7, "num_speculative_tokens": 3})", "\"model\" must be a string");
  expect_refused(R"({"method": "eagle3", "num_speculative_tokens": 3})", "method \"eagle3\" needs \"model\"");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1})",
                 "\"draft_tensor_parallel_size\" is not a key");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 1})", "outside 2");
  expect_refused(R"({"method": "ngram"})", "\"num_speculative_tokens\" is missing");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 0})", "outside 1");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 17})", "outside 1");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2.5})", "must be an integer");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})",
                 "prompt_lookup_min 4 is above prompt_lookup_max 2");
}

SpeculativeConfig ngram(int k, int lo, int hi) {
  SpeculativeConfig c;
  c.num_speculative_tokens = k, c.prompt_lookup_min = lo, c.prompt_lookup_max = hi;
  return c;
}

TEST(NgramDraft, TheTokensAfterTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  //                             0  1  2  3  4  5  6  7  8  9
  const std::vector<int32_t> t = {1, 2, 3, 9, 1, 2, 4, 5, 1, 2};
  // Suffix (1, 2) recurs at 4 (latest) and 0: the tokens after position 5.
  EXPECT_EQ(ngram_draft(t, ngram(3, 1, 2)), (std::vector<int32_t>{4, 5, 1}));
  // Only 3-grams allowed: (5, 1, 2) never recurs.
  EXPECT_TRUE(ngram_draft(t, ngram(3, 3, 3)).empty());
  // Longest first: (2, 3, 1, 2)? no; (1, 2) with max 4 still finds the 2-gram.
  EXPECT_EQ(ngram_draft(t, ngram(2, 1, 4)), (std::vector<int32_t>{4, 5}));
  // The continuation stops at the end of the sequence.
  const std::vector<int32_t> u = {7, 8, 7};
  EXPECT_EQ(ngram_draft(u, ngram(5, 1, 1)), (std::vector<int32_t>{8, 7}));
  EXPECT_TRUE(ngram_draft(std::vector<int32_t>{7}, ngram(5, 1, 1)).empty());
  EXPECT_TRUE(ngram_draft(std::vector<int32_t>{}, ngram(5, 1, 1)).empty());
}

TEST(Verify, AcceptedPrefixAndCounts) {
  EXPECT_EQ(accepted_prefix(std::vector<int32_t>{4, 5, 6}, std::vector<int32_t>{4, 5, 7, 8}), 2);
  EXPECT_EQ(accepted_prefix(std::vector<int32_t>{4, 5, 6}, std::vector<int32_t>{4, 5, 6, 8}), 3);
  EXPECT_EQ(accepted_prefix(std::vector<int32_t>{4}, std::vector<int32_t>{3, 8}), 0);
  EXPECT_THROW(accepted_prefix(std::vector<int32_t>{4}, std::vector<int32_t>{4}), Error);
  SpeculativeStats s;
  s.add(3, 2);  // positions 0, 1 accepted, 2 reached and rejected
  s.add(3, 0);  // position 0 reached and rejected
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.drafted, 6);
  EXPECT_EQ(s.accepted, 2);
  EXPECT_EQ(s.reached, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(s.accepted_at, (std::vector<int64_t>{1, 1, 0}));
  EXPECT_DOUBLE_EQ(s.acceptance_rate(), 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(s.mean_accepted_length(), 2.0);  // (2 + 1) and (0 + 1) tokens a step
}

// Speculative sampling keeps the target's distribution: for a row of random logits under
// temperature 0.8 / top-p 0.9 / top-k 40 (backend::RowSampler's distribution p), 20,000 seeded
// verifications of one drafted token — the likeliest token, one of middling probability, and one
// the filters removed (p = 0: always replaced) — give tokens whose counts fit p by Pearson's
// chi-square (bins of expected count ≥ 5, the rest pooled). The critical value is the chi-square
// quantile at 1 − 0.001 (Wilson–Hilferty), so a correct sampler fails a case with probability
// 0.001 (0.003 for the three); the seeds are fixed, so the test gives the same verdict every run.
// A sampler that kept the draft with probability 1, or resampled from p itself, misses by
// hundreds of chi-square units.
TEST(Verify, SpeculativeSamplingKeepsTheTargetDistribution) {
  std::mt19937 gen(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(200);
  for (float& v : logits) v = normal(gen);
  backend::RowSampling row;
  row.temperature = 0.8f, row.top_p = 0.9f, row.top_k = 40;
  backend::RowSampler sampler;
  std::vector<float> scratch = logits;
  const std::vector<float> p = sampler.probabilities(scratch, row);
  std::vector<int32_t> by_p(p.size());
  for (size_t i = 0; i < p.size(); ++i) by_p[i] = int32_t(i);
  std::sort(by_p.begin(), by_p.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  const int32_t removed = by_p.back();
  ASSERT_EQ(p[size_t(removed)], 0.0f);
  constexpr int kTrials = 20000;
  for (const int32_t draft : {by_p[0], by_p[5], removed}) {
    std::vector<int64_t> counts(p.size(), 0);
    int64_t kept = 0;
    for (int i = 0; i < kTrials; ++i) {
      const DraftVerdict v = verify_drafted_token(p, draft, backend::sampling_uniform(7, 2 * uint64_t(i)),
                                                  backend::sampling_uniform(7, 2 * uint64_t(i) + 1));
      ++counts[size_t(v.token)];
      kept += v.accepted ? 1 : 0;
      ASSERT_EQ(v.accepted, v.token == draft);
    }
    double chi2 = 0.0, pooled_expected = 0.0, pooled_observed = 0.0;
    int bins = 0;
    for (size_t t = 0; t < p.size(); ++t) {
      const double expected = double(p[t]) * kTrials;
      if (expected >= 5.0) {
        chi2 += (double(counts[t]) - expected) * (double(counts[t]) - expected) / expected;
        ++bins;
      } else {
        pooled_expected += expected;
        pooled_observed += double(counts[t]);
        if (p[t] == 0.0f) {
          EXPECT_EQ(counts[t], 0) << "token " << t << " has p = 0";
        }
      }
    }
    if (pooled_expected >= 5.0) {
      chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
      ++bins;
    }
    const double df = bins - 1, z = 3.090;  // the normal quantile at 1 − 0.001
    const double critical = df * std::pow(1.0 - 2.0 / (9.0 * df) + z * std::sqrt(2.0 / (9.0 * df)), 3.0);
    std::printf("[ draft p = %.4f ] kept %lld of %d; chi-square %.1f over %d bins, critical %.1f\n",
                double(p[size_t(draft)]), static_cast<long long>(kept), kTrials, chi2, bins, critical);
    EXPECT_LT(chi2, critical);
  }
}

}  // namespace
}  // namespace fp8lm::engine
