// Tokenizer::encode_at_most (issue 16): the server refuses prompts over the
// context with it, so it must agree exactly with encode() at every limit
// around the true count, and its lower bound (text bytes / max_bytes_per_token)
// must hold for every text of every real tokenizer; a huge text is refused
// without being tokenized.
#include <gtest/gtest.h>

#include <string>

#include "peak_memory.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fp8lm::test {
namespace {

using tokenizer::Tokenizer;

class TokenizerLimit : public ::testing::TestWithParam<TokenizerCase> {};

TEST_P(TokenizerLimit, AgreesWithEncodeAtEveryLimit) {
  const auto dir = tokenizer_dir(GetParam());
  if (!dir) GTEST_SKIP() << GetParam().where << " is not present";
  const Tokenizer tok = Tokenizer::load(*dir);
  auto texts = fixture_texts(read_fixture_json(tokenizer_fixture_dir() / (GetParam().name + ".json")));
  std::string all;
  for (const auto& t : texts) all += t;
  texts.push_back(all);
  texts.push_back(std::string(5000, ' '));
  for (const auto& text : texts) {
    SCOPED_TRACE(text.substr(0, 80));
    for (const bool special : {true, false}) {
      const auto ids = tok.encode(text, special);
      const std::size_t n = ids.size();
      for (std::size_t limit = n > 0 ? n - 1 : 0; limit <= n + 1; ++limit) {
        const auto got = tok.encode_at_most(text, special, limit);
        if (n > limit) {
          EXPECT_FALSE(got.has_value()) << "limit " << limit << " < " << n;
        } else {
          ASSERT_TRUE(got.has_value()) << "limit " << limit << " >= " << n;
          EXPECT_EQ(*got, ids);
        }
      }
      if (const auto bound = tok.max_bytes_per_token()) {
        EXPECT_GE(double(n) * *bound, double(text.size())) << "the lower bound does not hold";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Real, TokenizerLimit, ::testing::ValuesIn(tokenizer_cases()),
                         [](const ::testing::TestParamInfo<TokenizerCase>& p) { return p.param.name; });

// The shipped model's tokenizer (byte-level BPE) has a bound, so a 63 MB
// prompt is refused at once: tokenizing it in full took 11 s and 1.5 GB.
TEST(TokenizerLimit, HugeTextIsRefusedWithoutTokenizing) {
  const Tokenizer tok = Tokenizer::load(std::filesystem::path(FP8LM_FIXTURE_DIR) / ".." / ".." / "models" /
                                        "fp8lm-gutenberg-22m");
  ASSERT_TRUE(tok.max_bytes_per_token().has_value());
  std::string text;
  while (text.size() < (63u << 20)) text += "It was a dark and stormy night; the rain fell in torrents. ";
  // Memory is the measure (time depends on the machine and on sanitizers):
  // the text is refused without a copy of it, let alone its pieces.
  const std::int64_t before = reset_peak_rss_kib();
  EXPECT_FALSE(tok.encode_at_most(text, true, 1023).has_value());
  EXPECT_LT((peak_rss_kib() - before) / 1024, 32);
  // Just within the bound, the exact count decides.
  const std::string fits = "It was a dark and stormy night. ";
  EXPECT_EQ(tok.encode_at_most(fits, true, 1023), tok.encode(fits, true));
}

}  // namespace
}  // namespace fp8lm::test
