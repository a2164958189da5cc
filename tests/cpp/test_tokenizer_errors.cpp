// Malformed tokenizer.json: a clear fp8lm::Error naming the file and the
// JSON path or construct, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::test {
namespace {

using tokenizer::Tokenizer;

nlohmann::json minimal() {
  return nlohmann::json::parse(R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
    "decoder": {"type": "ByteLevel"}
  })");
}

// Expects loading `j` to fail with a message containing every one of `parts`.
void expect_error(const nlohmann::json& j, std::initializer_list<std::string> parts) {
  try {
    Tokenizer::from_json(j, "bad/tokenizer.json");
    ADD_FAILURE() << "no error for " << j.dump().substr(0, 200);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("bad/tokenizer.json"), std::string::npos) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(TokenizerErrors, MinimalLoadsAndWorks) {
  const Tokenizer t = Tokenizer::from_json(minimal(), "ok.json");
  EXPECT_EQ(t.encode("ab"), (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(t.decode(std::vector<std::uint32_t>{2, 0}), "aba");
}

TEST(TokenizerErrors, MissingModel) {
  auto j = minimal();
  j.erase("model");
  expect_error(j, {"model", "missing"});
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  for (const char* type : {"Unigram", "WordPiece", "WordLevel"}) {
    auto j = minimal();
    j["model"]["type"] = type;
    expect_error(j, {"model.type", type});
  }
}

TEST(TokenizerErrors, BadMerges) {
  auto j = minimal();
  j["model"]["merges"] = nlohmann::json::array({"a c"});
  expect_error(j, {"model.merges[0]", "'c'"});
  j["model"]["merges"] = nlohmann::json::array({"abc"});
  expect_error(j, {"model.merges[0]"});
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a"})});
  expect_error(j, {"model.merges[0]"});
  j["model"]["merges"] = nlohmann::json::array({42});
  expect_error(j, {"model.merges[0]"});
  j["model"]["merges"] = "a b";
  expect_error(j, {"model.merges", "array"});
  j["model"]["vocab"]["x"] = 5;
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"x", "b"})});
  expect_error(j, {"model.merges[0]", "xb"});
}

TEST(TokenizerErrors, UnknownComponentTypes) {
  auto j = minimal();
  j["pre_tokenizer"] = {{"type", "Fancy"}};
  expect_error(j, {"pre_tokenizer.type", "Fancy"});
  j = minimal();
  j["normalizer"] = {{"type", "Precompiled"}};
  expect_error(j, {"normalizer.type", "Precompiled"});
  j = minimal();
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "CTC"}}}}};
  expect_error(j, {"decoder.decoders[0].type", "CTC"});
  j = minimal();
  j["post_processor"] = {{"type", "Nope"}};
  expect_error(j, {"post_processor.type", "Nope"});
}

TEST(TokenizerErrors, WrongFieldTypes) {
  auto j = minimal();
  j["model"]["vocab"]["a"] = "zero";
  expect_error(j, {"model.vocab.a", "integer"});
  j = minimal();
  j["model"]["vocab"] = nlohmann::json::array();
  expect_error(j, {"model.vocab", "object"});
  j = minimal();
  j["model"]["byte_fallback"] = "yes";
  expect_error(j, {"model.byte_fallback", "boolean"});
  j = minimal();
  j["added_tokens"] = {{{"id", -1}, {"content", "x"}}};
  expect_error(j, {"added_tokens[0].id"});
  j = minimal();
  j["added_tokens"] = {{{"id", 7}}};
  expect_error(j, {"added_tokens[0].content", "missing"});
  j = minimal();
  j["model"]["unk_token"] = "<nope>";
  expect_error(j, {"model.unk_token", "<nope>"});
  expect_error(nlohmann::json::array(), {"object"});
}

TEST(TokenizerErrors, BadRegex) {
  auto j = minimal();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(\\p{L"}}}, {"behavior", "Isolated"}};
  expect_error(j, {"pre_tokenizer.pattern.Regex", "invalid regex"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  expect_error(j, {"pre_tokenizer.behavior", "Sideways"});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", 3}, {"behavior", "Isolated"}};
  expect_error(j, {"pre_tokenizer.pattern"});
}

TEST(TokenizerErrors, BadTemplate) {
  auto j = minimal();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                         {"special_tokens", nlohmann::json::object()}};
  expect_error(j, {"post_processor.single[0]", "<s>"});
}

TEST(TokenizerErrors, InvalidUtf8Input) {
  const Tokenizer t = Tokenizer::from_json(minimal(), "ok.json");
  EXPECT_THROW(t.encode("a\xFF"), Error);
}

TEST(TokenizerErrors, MissingFileNamesIt) {
  try {
    Tokenizer::load("/nonexistent/model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model/tokenizer.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8lm::test
