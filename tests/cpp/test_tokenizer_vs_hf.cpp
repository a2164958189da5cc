// Ids and decoded text identical to Hugging Face `tokenizers` for every real
// BPE tokenizer.json we have, over the fixture text set.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fp8lm::test {
namespace {

using tokenizer::Tokenizer;

// Loading the large vocabularies takes a moment: once per tokenizer.
const Tokenizer& cached_tokenizer(const std::filesystem::path& dir) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[dir.string()];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(dir));
  return *slot;
}

class TokenizerVsHf : public ::testing::TestWithParam<TokenizerCase> {};

std::string show(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TEST_P(TokenizerVsHf, IdsAndDecodeMatch) {
  const auto dir = tokenizer_dir(GetParam());
  if (!dir) GTEST_SKIP() << GetParam().where << " is not present";
  const Tokenizer& tok = cached_tokenizer(*dir);
  const auto fixture = read_fixture_json(tokenizer_fixture_dir() / (GetParam().name + ".json"));
  const auto texts = fixture_texts(fixture);
  const auto& cases = fixture.at("cases");
  ASSERT_EQ(texts.size(), cases.size());
  EXPECT_EQ(tok.vocab_size(true), fixture.at("vocab_size").get<std::size_t>());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE("text " + std::to_string(i) + ": " + show(texts[i]));
    const auto ids = tok.encode(texts[i], true);
    EXPECT_EQ(ids, c.at("ids").get<std::vector<std::uint32_t>>());
    const auto plain = tok.encode(texts[i], false);
    EXPECT_EQ(plain, c.at("ids_no_special").get<std::vector<std::uint32_t>>());
    const auto expected_ids = c.at("ids").get<std::vector<std::uint32_t>>();
    EXPECT_EQ(tok.decode(expected_ids, false), c.at("decoded").get<std::string>());
    EXPECT_EQ(tok.decode(expected_ids, true), c.at("decoded_skip").get<std::string>());
  }
}

// decode(encode(x)) == x wherever Hugging Face's own round trip is lossless.
TEST_P(TokenizerVsHf, RoundTripWhereLossless) {
  const auto dir = tokenizer_dir(GetParam());
  if (!dir) GTEST_SKIP() << GetParam().where << " is not present";
  const Tokenizer& tok = cached_tokenizer(*dir);
  const auto fixture = read_fixture_json(tokenizer_fixture_dir() / (GetParam().name + ".json"));
  const auto texts = fixture_texts(fixture);
  std::size_t lossless = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto& c = fixture.at("cases")[i];
    if (c.at("decoded").get<std::string>() != texts[i] || c.at("ids") != c.at("ids_no_special")) continue;
    ++lossless;
    EXPECT_EQ(tok.decode(tok.encode(texts[i], false)), texts[i]) << show(texts[i]);
  }
  // Byte-level tokenizers without a normalizer are lossless on every text.
  if (GetParam().name == "gpt2" || GetParam().name == "gutenberg") {
    EXPECT_EQ(lossless, texts.size());
  }
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, TokenizerVsHf, ::testing::ValuesIn(tokenizer_cases()),
                         [](const ::testing::TestParamInfo<TokenizerCase>& p) { return p.param.name; });

TEST(TokenizerApi, SpecialTokensFromConfig) {
  const auto dir = tokenizer_dir({"tinyllama", "hf:TinyLlama__TinyLlama_v1.1"});
  if (!dir) GTEST_SKIP() << "TinyLlama is not present";
  const Tokenizer& tok = cached_tokenizer(*dir);
  ASSERT_TRUE(tok.bos().has_value());
  EXPECT_EQ(tok.bos()->content, "<s>");
  EXPECT_EQ(tok.bos()->id, 1u);
  ASSERT_TRUE(tok.eos().has_value());
  EXPECT_EQ(tok.eos()->id, 2u);
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(500));
  EXPECT_EQ(tok.id_to_token(1).value_or(""), "<s>");
  EXPECT_EQ(tok.token_to_id("<0x41>").value_or(0), 68u);
  EXPECT_FALSE(tok.id_to_token(99999999).has_value());
}

TEST(TokenizerApi, ShippedModelLoadsFromDirectoryAndFile) {
  const auto dir = tokenizer_dir({"gutenberg", "repo:models/fp8lm-gutenberg-22m"});
  ASSERT_TRUE(dir.has_value());
  const Tokenizer a = Tokenizer::load(*dir);
  const Tokenizer b = Tokenizer::load(*dir / "tokenizer.json");
  EXPECT_EQ(a.encode("It was a dark and stormy night."), b.encode("It was a dark and stormy night."));
  EXPECT_GT(a.vocab_size(), 100u);
}

}  // namespace
}  // namespace fp8lm::test
