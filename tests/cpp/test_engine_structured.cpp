// Structured outputs in the engine (issue 43) on the shipped model: constrained requests batched
// with others under chunked prefill and a small KV cache (preemption), async scheduling on and
// off, each give exactly what engine::generate gives alone with the same grammar — greedy and
// seeded sampling — and every output is in its grammar's language (checked with PCRE2, and
// by re-running the tokens through a fresh matcher, which xgrammar's Python package agrees with
// mask by mask: test_structured.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_matcher.h"
#include "tokenizer/regex.h"

namespace fp8lm::test {
namespace {

using Kind = structured::GrammarSpec::Kind;

std::filesystem::path shipped_dir() {
  return std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>();
}

struct Case {
  std::string prompt;
  structured::GrammarSpec spec;
  std::string regex;  // its language as a PCRE2 pattern (empty: a JSON schema, checked by the matcher alone)
  float temperature = 0.0f;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"The date was", {Kind::kRegex, "[0-9]{4}-(0[1-9]|1[0-2])-[0-2][0-9]", {}, true}, "[0-9]{4}-(0[1-9]|1[0-2])-[0-2][0-9]", 0.0f},
      {"He said", {Kind::kChoice, "", {"yes", "no", "never again"}, true}, "yes|no|never again", 0.8f},
      {"Call me at", {Kind::kRegex, "\\(\\d{3}\\) \\d{3}-\\d{4}", {}, true}, "\\(\\d{3}\\) \\d{3}-\\d{4}", 0.8f},
      {"The record:",
       {Kind::kJsonSchema, R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "age"]})", {}, false},
       "", 0.0f},
      {"Sum:", {Kind::kGrammar, "root ::= [1-9] [0-9]? (\"+\" [1-9] [0-9]?){1,3}", {}, true}, "[1-9][0-9]?(\\+[1-9][0-9]?){1,3}", 0.8f},
  };
  return c;
}

class EngineStructured : public ::testing::TestWithParam<bool> {};

TEST_P(EngineStructured, BatchedEqualsAloneAndStaysInTheLanguage) {
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = 64;  // four blocks: the batch preempts
  auto rt = engine::Runtime::load(shipped_dir(), {}, opt);
  const structured::GrammarVocabulary vocab(rt->tokenizer(), shipped_dir() / "tokenizer.json", rt->config().vocab_size,
                                            rt->eos_ids());
  structured::GrammarCompiler compiler(vocab);

  std::vector<engine::Request> requests;
  std::vector<std::vector<int32_t>> alone;
  std::vector<std::shared_ptr<const structured::CompiledGrammar>> grammars;
  for (size_t i = 0; i < cases().size() * 2; ++i) {  // each case twice: two seeds
    const Case& c = cases()[i % cases().size()];
    const std::vector<uint32_t> ids = rt->tokenizer().encode(c.prompt);
    engine::Request r;
    r.prompt.assign(ids.begin(), ids.end());
    r.params.temperature = c.temperature;
    r.params.seed = 100 + i;
    r.params.max_tokens = 48;
    r.grammar = compiler.compile(c.spec);
    grammars.push_back(r.grammar);
    alone.push_back(engine::generate(*rt, r.prompt, r.params, {}, nullptr, nullptr, r.grammar).tokens);
    requests.push_back(std::move(r));
  }
  // Unconstrained requests beside them.
  for (int i = 0; i < 3; ++i) {
    engine::Request r;
    r.prompt = {int32_t(500 + i), int32_t(900 + i)};
    r.params.max_tokens = 20;
    r.params.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  engine::SchedulerConfig sched{32, 6};
  sched.async_scheduling = GetParam();
  engine::Engine eng(*rt, sched);
  for (engine::Request& r : requests) eng.add_request(std::move(r));
  const std::vector<engine::Completion> done = eng.run_to_completion();
  ASSERT_EQ(done.size(), cases().size() * 2 + 3);
  EXPECT_GT(eng.num_preemptions(), 0);
  for (size_t i = 0; i < alone.size(); ++i) {
    const Case& c = cases()[i % cases().size()];
    SCOPED_TRACE(c.prompt + " " + structured::kind_name(c.spec.kind));
    EXPECT_EQ(done[i].tokens, alone[i]);
    EXPECT_EQ(done[i].finish_reason, "stop") << done[i].text << done[i].error;
    if (!c.regex.empty()) {  // PCRE2 (the tokenizer's regex engine), anchored at both ends
      const tokenizer::Regex re("^(?:" + c.regex + ")$", "the test's pattern");
      size_t start = 0, end = 0;
      EXPECT_TRUE(re.find(done[i].text, 0, start, end) && start == 0 && end == done[i].text.size()) << done[i].text;
    }
    // The tokens, stop token included, take a fresh matcher to its end.
    structured::GrammarMatcher m(grammars[i], rt->eos_ids());
    for (const int32_t t : done[i].tokens) ASSERT_TRUE(m.accept(t)) << t;
    EXPECT_TRUE(m.terminated());
  }
  for (size_t i = alone.size(); i < done.size(); ++i) EXPECT_EQ(done[i].tokens.size(), 20u);
}

INSTANTIATE_TEST_SUITE_P(Scheduling, EngineStructured, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "async" : "sync"; });

// A grammar compiled for another vocabulary is refused at add_request, naming both sizes.
TEST(EngineStructuredRefusals, GrammarOfAnotherVocabulary) {
  engine::RuntimeOptions opt;
  opt.threads = 1;
  auto rt = engine::Runtime::load(shipped_dir(), {}, opt);
  const structured::GrammarVocabulary other(rt->tokenizer(), shipped_dir() / "tokenizer.json", 20000, rt->eos_ids());
  structured::GrammarCompiler compiler(other);
  engine::Engine eng(*rt);
  engine::Request r;
  r.prompt = {5};
  r.grammar = compiler.compile({Kind::kRegex, "a", {}, true});
  try {
    eng.add_request(std::move(r));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("20000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8lm::test
