// Structured outputs' token masks equal xgrammar's Python package's (the reference: what vLLM and
// SGLang run) for the same grammar and tokenizer, step by step along a text of the grammar's
// language: tests/fixtures/grammar/masks.json, made by tools/make_grammar_fixtures.py on the
// shipped tokenizer and those of ../shared/data/hf (byte-level and byte-fallback vocabularies).
// Also: specs both refuse, the compile cache, a choice's grammar.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_matcher.h"
#include "server/structured_request.h"
#include "structured/grammar_vocabulary.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace fp8lm::structured {
namespace {

using Kind = GrammarSpec::Kind;

const nlohmann::json& fixture() {
  static const nlohmann::json f =
      test::read_fixture_json(std::filesystem::path(FP8LM_FIXTURE_DIR) / "grammar" / "masks.json");
  return f;
}

GrammarSpec spec_of(const nlohmann::json& j) {
  static const std::map<std::string, Kind> kinds = {{"json_object", Kind::kJsonObject}, {"json_schema", Kind::kJsonSchema},
                                                    {"regex", Kind::kRegex},             {"choice", Kind::kChoice},
                                                    {"grammar", Kind::kGrammar}};
  GrammarSpec s;
  s.kind = kinds.at(j.at("kind").get<std::string>());
  s.text = j.value("text", "");
  s.choices = j.value("choices", std::vector<std::string>{});
  s.any_whitespace = j.value("any_whitespace", true);
  return s;
}

// The hash the fixture script records: 64-bit FNV-1a over the words' little-endian bytes.
std::string fnv1a64(std::span<const uint32_t> words) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint32_t w : words)
    for (int b = 0; b < 4; ++b) h = (h ^ ((w >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int64_t popcount(std::span<const uint32_t> words) {
  int64_t n = 0;
  for (const uint32_t w : words) n += __builtin_popcount(w);
  return n;
}

// One tokenizer of the fixture: its vocabulary and a compiler over it.
struct Loaded {
  tokenizer::Tokenizer tok;
  std::unique_ptr<GrammarVocabulary> vocab;
  std::unique_ptr<GrammarCompiler> compiler;
};

Loaded* load(const nlohmann::json& t) {
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  const std::string name = t.at("name");
  if (auto it = cache.find(name); it != cache.end()) return it->second.get();
  const auto dir = test::tokenizer_dir({name, t.at("where").get<std::string>()});
  if (!dir) return nullptr;
  auto l = std::make_unique<Loaded>(Loaded{tokenizer::Tokenizer::load(*dir / "tokenizer.json"), nullptr, nullptr});
  const std::vector<int32_t> eos = t.at("eos");
  l->vocab = std::make_unique<GrammarVocabulary>(l->tok, *dir / "tokenizer.json", t.at("vocab_size").get<int64_t>(), eos);
  l->compiler = std::make_unique<GrammarCompiler>(*l->vocab);
  return (cache[name] = std::move(l)).get();
}

class GrammarMasks : public ::testing::TestWithParam<std::string> {};

TEST_P(GrammarMasks, EqualXgrammarPythonAlongAText) {
  const nlohmann::json* tj = nullptr;
  for (const auto& t : fixture().at("tokenizers"))
    if (t.at("name") == GetParam()) tj = &t;
  ASSERT_NE(tj, nullptr);
  Loaded* l = load(*tj);
  if (l == nullptr) GTEST_SKIP() << GetParam() << "'s tokenizer.json is absent";
  EXPECT_EQ(l->vocab->vocab_type(), tj->at("vocab_type").get<std::string>());
  int cases = 0;
  for (const auto& c : fixture().at("cases")) {
    if (c.at("tokenizer") != GetParam()) continue;
    const GrammarSpec spec = spec_of(c.at("spec"));
    SCOPED_TRACE(std::string(kind_name(spec.kind)) + " " + spec.text.substr(0, 60));
    if (c.contains("refused")) {
      ASSERT_TRUE(c.at("refused").get<bool>());
      EXPECT_THROW(l->compiler->compile(spec), Error);
      continue;
    }
    ++cases;
    const auto compiled = l->compiler->compile(spec);
    GrammarMatcher m(compiled, l->vocab->eos_ids());
    // The same grammar through xgrammar's JSON, as the server's worker processes hand it over
    // (compile_worker.h): the same masks.
    GrammarMatcher copy(CompiledGrammar::deserialize(compiled->serialize(), *l->vocab), l->vocab->eos_ids());
    std::vector<uint32_t> mask(mask_words(l->vocab->vocab_size())), copy_mask(mask.size());
    const std::vector<int32_t> tokens = c.at("tokens");
    const auto& masks = c.at("masks");
    const std::vector<bool> accepted = c.at("accepted");
    for (size_t i = 0; i < masks.size(); ++i) {
      m.fill_mask(mask);
      copy.fill_mask(copy_mask);
      ASSERT_EQ(popcount(mask), masks[i].at("allowed").get<int64_t>()) << "before token " << i;
      ASSERT_EQ(fnv1a64(mask), masks[i].at("fnv1a64").get<std::string>()) << "before token " << i;
      ASSERT_EQ(copy_mask, mask) << "deserialized, before token " << i;
      ASSERT_EQ(mask_allows(mask, tokens[i]), bool(accepted[i])) << "token " << i;
      ASSERT_EQ(m.accept(tokens[i]), bool(accepted[i])) << "token " << i;
      ASSERT_EQ(copy.accept(tokens[i]), bool(accepted[i])) << "deserialized, token " << i;
    }
    EXPECT_EQ(m.terminated(), c.at("terminated").get<bool>());
    if (m.terminated()) {  // nothing after the stop token
      m.fill_mask(mask);
      EXPECT_EQ(popcount(mask), 0);
      EXPECT_FALSE(m.accept(tokens[0]));
    }
  }
  EXPECT_GE(cases, 9);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GrammarMasks, ::testing::Values("gutenberg", "qwen3", "deepseek_v3", "tinyllama"));

Loaded& shipped() {
  for (const auto& t : fixture().at("tokenizers"))
    if (t.at("name") == "gutenberg") return *load(t);
  throw Error("no gutenberg tokenizer in the fixture");
}

TEST(GrammarCompiler, CachesPerSpecAndCountsHitsAndRefusals) {
  // A compiler of its own: the counts start at zero.
  Loaded& l = shipped();
  GrammarCompiler c(*l.vocab);
  GrammarSpec a{Kind::kRegex, "[0-9]+", {}, true};
  const auto g1 = c.compile(a);
  const auto g2 = c.compile(a);
  EXPECT_EQ(g1.get(), g2.get());
  GrammarSpec b = a;
  b.text = "[0-9]*";
  EXPECT_NE(c.compile(b).get(), g1.get());
  EXPECT_THROW(c.compile({Kind::kRegex, "[0-9", {}, true}), Error);
  const auto s = c.stats();
  EXPECT_EQ(s.compilations, 2);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.failures, 1);
  EXPECT_GT(s.cached_bytes, 0);
}

TEST(GrammarCompiler, EvictsLeastRecentlyUsedBeyondItsBytes) {
  Loaded& l = shipped();
  GrammarCompiler c(*l.vocab, 1, /*cache_bytes=*/1);  // room for the newest alone
  const auto g1 = c.compile({Kind::kRegex, "a+", {}, true});
  c.compile({Kind::kRegex, "b+", {}, true});
  EXPECT_NE(c.compile({Kind::kRegex, "a+", {}, true}).get(), g1.get());  // compiled again
  EXPECT_EQ(c.stats().compilations, 3);
  EXPECT_EQ(c.stats().cache_hits, 0);
}

TEST(CompiledGrammar, DeserializeRefusesWhatIsNotOne) {
  Loaded& l = shipped();
  EXPECT_THROW(CompiledGrammar::deserialize("not json", *l.vocab), Error);
  EXPECT_THROW(CompiledGrammar::deserialize("{}", *l.vocab), Error);
  const std::string json = l.compiler->compile({Kind::kRegex, "[a-z]+", {}, true})->serialize();
  EXPECT_THROW(CompiledGrammar::deserialize(json.substr(0, json.size() / 2), *l.vocab), Error);
}

// What compiling `s` throws, or "(compiled)".
std::string compile_error(GrammarCompiler& c, const GrammarSpec& s) {
  try {
    c.compile(s);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return "(compiled)";
}

TEST(GrammarCompiler, RefusesByNameWhatIsWrong) {
  Loaded& l = shipped();
  auto message = [&](const GrammarSpec& s) { return compile_error(*l.compiler, s); };
  EXPECT_EQ(message({Kind::kChoice, "", {}, true}), "choice: the list of choices is empty");
  EXPECT_EQ(message({Kind::kRegex, "(ab", {}, true}).rfind("regex: ", 0), 0u);
  EXPECT_EQ(message({Kind::kJsonSchema, "{", {}, true}).rfind("json_schema: ", 0), 0u);
  EXPECT_EQ(message({Kind::kGrammar, "root ::= nothing", {}, true}).rfind("grammar: ", 0), 0u);
}

TEST(GrammarCompiler, ChoiceGrammarEscapesItsLiterals) {
  EXPECT_EQ(choice_grammar({"a", "b\"c", "d\\e", "\n"}), "root ::= \"a\" | \"b\\\"c\" | \"d\\\\e\" | \"\\u000a\"");
  // Each choice, and only they, lead to completion.
  Loaded& l = shipped();
  const std::vector<std::string> choices = {"yes", "no", "a \"quoted\"\tword"};
  const auto g = l.compiler->compile({Kind::kChoice, "", choices, true});
  for (const std::string& text : choices) {
    GrammarMatcher m(g, l.vocab->eos_ids());
    for (const uint32_t id : l.tok.encode(text, false)) ASSERT_TRUE(m.accept(int32_t(id))) << text;
    EXPECT_TRUE(m.accept(0)) << text;  // EOS once complete
    EXPECT_TRUE(m.terminated());
  }
  GrammarMatcher m(g, l.vocab->eos_ids());
  for (const uint32_t id : l.tok.encode("ye", false)) ASSERT_TRUE(m.accept(int32_t(id)));
  EXPECT_FALSE(m.accept(0));  // "ye" is no choice
}

TEST(GrammarMatcher, RefusesBadStopIdsAndMaskSizes) {
  Loaded& l = shipped();
  const auto g = l.compiler->compile({Kind::kRegex, "x", {}, true});
  EXPECT_THROW(GrammarMatcher(g, std::vector<int32_t>{16384}), Error);
  GrammarMatcher m(g, l.vocab->eos_ids());
  std::vector<uint32_t> small(3);
  EXPECT_THROW(m.fill_mask(small), Error);
  EXPECT_FALSE(m.accept(-1));
  EXPECT_FALSE(m.accept(16384));
}


// What xgrammar would not enforce is refused by name, never compiled into a looser grammar.
TEST(GrammarCompiler, RefusesSchemaKeywordsTheLibraryWouldIgnore) {
  Loaded& l = shipped();
  auto message = [&](const std::string& schema) { return compile_error(*l.compiler, {Kind::kJsonSchema, schema, {}, true}); };
  EXPECT_EQ(message(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})"),
            "json_schema: the keyword \"uniqueItems\" at # is not supported by fp8lm's grammar library (xgrammar would "
            "not enforce it)");
  EXPECT_NE(message(R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})").find("\"not\" at #/properties/a"),
            std::string::npos);
  EXPECT_NE(message(R"({"$defs": {"x": {"if": {}, "then": {}}}, "$ref": "#/$defs/x"})").find("\"if\" at #/$defs/x"),
            std::string::npos);
  // Warnings of the library about constraints it drops.
  EXPECT_NE(message(R"({"type": "number", "multipleOf": 0.5})").find("not supported by fp8lm's grammar library"),
            std::string::npos);
  // A property named like a keyword is data.
  EXPECT_EQ(message(R"({"type": "object", "properties": {"not": {"type": "string"}, "if": {"type": "integer"}}})"),
            "(compiled)");
  EXPECT_EQ(message(R"({"type": "string", "pattern": "^[a-z]+$"})"), "(compiled)");
}


// A reasoning model's constraint holds after its thinking (server/structured_request.h).
TEST(AfterReasoning, TheConstraintHoldsOnceTheThinkingEnds) {
  Loaded& l = shipped();
  const GrammarSpec json{Kind::kJsonSchema, R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})", {}, true};
  auto ends = [&](server::ReasoningParser p, const std::string& text) {
    GrammarMatcher m(l.compiler->compile(server::after_reasoning(json, p, "response_format")), l.vocab->eos_ids());
    for (const uint32_t id : l.tok.encode(text, false))
      if (!m.accept(int32_t(id))) return false;
    return m.accept(0) && m.terminated();
  };
  using P = server::ReasoningParser;
  EXPECT_TRUE(ends(P::kQwen3, "<think>\nLet me see: a is one.\n</think>\n\n{\"a\": 1}"));
  EXPECT_TRUE(ends(P::kQwen3, "{\"a\": 1}"));  // qwen3 may answer without thinking
  EXPECT_FALSE(ends(P::kQwen3, "Let me see {\"a\": 1}"));
  EXPECT_FALSE(ends(P::kQwen3, "<think>x</think>{\"b\": 1}"));
  EXPECT_TRUE(ends(P::kDeepSeekR1, "a is one.\n</think>\n\n{\"a\": 1}"));  // the template opened <think>
  EXPECT_FALSE(ends(P::kDeepSeekR1, "{\"a\": 1}"));  // the reasoning never ended
  // Every kind of constraint can follow thinking; a regex, a choice.
  const auto regex = server::after_reasoning({Kind::kRegex, "[0-9]{3}", {}, true}, P::kQwen3, "structured_outputs");
  GrammarMatcher m(l.compiler->compile(regex), l.vocab->eos_ids());
  for (const uint32_t id : l.tok.encode("<think>ok</think>123", false)) ASSERT_TRUE(m.accept(int32_t(id)));
  EXPECT_NO_THROW(l.compiler->compile(server::after_reasoning({Kind::kChoice, "", {"yes", "no"}, true}, P::kDeepSeekR1, "x")));
  EXPECT_TRUE(server::reasoning_ended("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(server::reasoning_ended("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(server::reasoning_ended("<|im_start|>assistant\n"));
}

}  // namespace
}  // namespace fp8lm::structured
