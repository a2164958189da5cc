// Speculative decoding's pieces (src/engine/speculative.h): vLLM's --speculative-config JSON and
// what fp8lm refuses of it by name, the n-gram drafter, the accepted prefix, the counts.
// Greedy generation with speculation against transformers' tokens: test_generate.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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
}

TEST(SpeculativeConfig, RefusesWhatItDoesNotImplementByName) {
  expect_refused("{not json", "not valid JSON");
  expect_refused("[1, 2]", "expected a JSON object");
  expect_refused(R"({"num_speculative_tokens": 3})", "\"method\" is missing");
  expect_refused(R"({"method": "eagle3", "model": "x", "num_speculative_tokens": 3})", "\"model\"");
  expect_refused(R"({"method": "eagle3", "num_speculative_tokens": 3})", "method \"eagle3\" is not implemented");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 3, "disable_by_batch_size": 8})",
                 "\"disable_by_batch_size\" is not a key");
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

}  // namespace
}  // namespace fp8lm::engine
