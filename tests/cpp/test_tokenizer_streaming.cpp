// Incremental decoding: the streamed pieces concatenate to decode(all ids)
// and are never broken UTF-8, also when a character is split across tokens.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_fixtures.h"

namespace fp8lm::test {
namespace {

using tokenizer::Tokenizer;

// Streams `ids` and checks each piece and the whole; returns the pieces.
std::vector<std::string> stream(const Tokenizer& tok, const std::vector<std::uint32_t>& ids, bool skip) {
  auto dec = tok.incremental_decoder(skip);
  std::vector<std::string> pieces;
  for (const auto id : ids) pieces.push_back(dec.push(id));
  pieces.push_back(dec.finish());
  std::string all;
  for (const auto& p : pieces) {
    EXPECT_TRUE(tokenizer::utf8::is_valid(p)) << nlohmann::json(p).dump(2, ' ', true, nlohmann::json::error_handler_t::replace);
    all += p;
  }
  EXPECT_EQ(all, tok.decode(ids, skip));
  return pieces;
}

class StreamingVsFull : public ::testing::TestWithParam<TokenizerCase> {};

TEST_P(StreamingVsFull, EqualsFullDecode) {
  const auto dir = tokenizer_dir(GetParam());
  if (!dir) GTEST_SKIP() << GetParam().where << " is not present";
  const Tokenizer tok = Tokenizer::load(*dir);
  const auto fixture = read_fixture_json(tokenizer_fixture_dir() / (GetParam().name + ".json"));
  const auto& cases = fixture.at("cases");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const auto ids = cases[i].at("ids").get<std::vector<std::uint32_t>>();
    stream(tok, ids, false);
    stream(tok, ids, true);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, StreamingVsFull, ::testing::ValuesIn(tokenizer_cases()),
                         [](const ::testing::TestParamInfo<TokenizerCase>& p) { return p.param.name; });

// A tiny SentencePiece-style tokenizer with byte fallback, written here so the
// test needs no external file.
Tokenizer tiny_byte_fallback() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\xE2\x96\x81", 2}, {"a", 3}, {"\xE2\x96\x81" "a", 4}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 5 + b;
  }
  const nlohmann::json j = {
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"\xE2\x96\x81 a"}}, {"unk_token", "<unk>"},
        {"byte_fallback", true}, {"fuse_unk", true}}},
      {"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}}};
  return Tokenizer::from_json(j, "tiny.json");
}

TEST(Streaming, ByteFallbackCharacterSplitAcrossTokens) {
  const Tokenizer tok = tiny_byte_fallback();
  // "a €a": € is E2 82 AC, three byte tokens.
  const auto ids = tok.encode("a \xE2\x82\xAC" "a", false);
  const std::vector<std::uint32_t> expected = {4, 2, 5 + 0xE2, 5 + 0x82, 5 + 0xAC, 3};
  ASSERT_EQ(ids, expected);
  EXPECT_EQ(tok.decode(ids), "a \xE2\x82\xAC" "a");
  const auto pieces = stream(tok, ids, false);
  EXPECT_EQ(pieces[0], "a");
  EXPECT_EQ(pieces[2], "");  // first byte of €: held back
  EXPECT_EQ(pieces[3], "");
  EXPECT_EQ(pieces[4], "\xE2\x82\xAC");
}

TEST(Streaming, InvalidBytesAreFlushedAsReplacementCharacters) {
  const Tokenizer tok = tiny_byte_fallback();
  // A lone continuation byte can never complete: decode gives U+FFFD.
  const std::vector<std::uint32_t> ids = {4, 5 + 0x82, 3};
  const auto pieces = stream(tok, ids, false);
  EXPECT_EQ(tok.decode(ids), "a\xEF\xBF\xBD" "a");
  // An unfinished character at the end of a stream is flushed by finish().
  stream(tok, {4, 5 + 0xE2}, false);
}

TEST(Streaming, ByteLevelCharacterSplitAcrossTokens) {
  const auto dir = tokenizer_dir({"gpt2", "hf:openai-community__gpt2"});
  if (!dir) GTEST_SKIP() << "gpt2 is not present";
  const Tokenizer tok = Tokenizer::load(*dir);
  // GPT-2 spells rare CJK and emoji as several byte tokens.
  const std::string text = "x 👨‍👩‍👧 龘 y";
  const auto ids = tok.encode(text, false);
  EXPECT_GT(ids.size(), 8u);
  stream(tok, ids, false);
}

TEST(Utf8, LossyMatchesRustMaximalSubparts) {
  using tokenizer::utf8::lossy;
  EXPECT_EQ(lossy("a\xF0\x9F\x98" "b"), "a\xEF\xBF\xBD" "b");          // truncated 4-byte: one U+FFFD
  EXPECT_EQ(lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");             // overlong: each byte
  EXPECT_EQ(lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
}

}  // namespace
}  // namespace fp8lm::test
