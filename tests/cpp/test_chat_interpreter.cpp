// The interpreter construct by construct, against jinja2 in transformers'
// environment (tests/fixtures/chat/interpreter.json), and malformed or
// hostile templates: errors naming the construct and line, never a crash or hang.
#include <gtest/gtest.h>


#include "chat/chat_template.h"
#include "chat/eval.h"
#include "chat_test_util.h"
#include "peak_memory.h"

namespace fp8lm::test {
namespace {

// Renders `source` with `vars` as the template's variables (no messages).
std::string render_unit(const std::string& source, const nlohmann::ordered_json& vars, const chat::RenderEnv& env) {
  chat::ChatTemplate t(source);
  chat::ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "unused"}])");
  in.kwargs = vars;
  return t.render(in, "", "", env);
}

class InterpreterUnits : public ::testing::TestWithParam<std::size_t> {};

const nlohmann::ordered_json& units() {
  static const nlohmann::ordered_json u = read_ordered_json(chat_fixture("interpreter.json"));
  return u;
}

TEST_P(InterpreterUnits, MatchesJinja2) {
  const auto& u = units()[GetParam()];
  const std::string src = u["template"];
  if (u.contains("expected")) {
    try {
      EXPECT_EQ(render_unit(src, u["vars"], fixed_clock_env()), u["expected"].get<std::string>()) << src;
    } catch (const std::exception& e) {
      ADD_FAILURE() << src << ": unexpected error: " << e.what();
    }
  } else if (u["raised"].get<bool>()) {
    try {
      render_unit(src, u["vars"], fixed_clock_env());
      ADD_FAILURE() << src << ": expected an error";
    } catch (const chat::TemplateRaised& e) {
      EXPECT_EQ(e.message(), u["error"].get<std::string>());
    }
  } else {
    EXPECT_THROW(render_unit(src, u["vars"], fixed_clock_env()), Error) << src << " (jinja2: " << u["error"] << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Chat, InterpreterUnits, ::testing::Range<std::size_t>(0, units().size()),
                         [](const auto& param_info) { return units()[param_info.param]["name"].template get<std::string>(); });

// The error message of rendering (or parsing) `source`, or "" when it succeeds.
std::string error_of(const std::string& source, chat::RenderLimits limits = {}) {
  try {
    chat::ChatTemplate t(source);
    chat::ChatInputs in;
    in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    chat::RenderEnv env;
    env.limits = limits;
    t.render(in, "", "", env);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

void expect_error(const std::string& source, const std::string& needle, chat::RenderLimits limits = {}) {
  const std::string err = error_of(source, limits);
  EXPECT_NE(err.find(needle), std::string::npos) << "template: " << source << "\nerror: " << err;
}

TEST(MalformedTemplates, NameTheConstructAndLine) {
  expect_error("a\n{% if x %}b", "line 2: unclosed block: expected 'elif'");
  expect_error("{% for x in y %}", "unclosed block: expected 'else'");
  expect_error("{% macro m() %}", "expected 'endmacro'");
  expect_error("x\n\n{{ y | nosuchfilter }}", "line 3: unknown filter 'nosuchfilter'");
  expect_error("{{ y is nosuchtest }}", "unknown test 'nosuchtest'");
  expect_error("{% include 'x' %}", "line 1: unsupported tag 'include'");
  expect_error("{% extends 'x' %}", "unsupported tag 'extends'");
  expect_error("{{ 1 + }}", "unexpected '}}'");
  expect_error("{{ 'abc }}", "unterminated string literal");
  expect_error("{{ a", "unclosed '{{'");
  expect_error("{# never closed", "unclosed comment");
  expect_error("{% endif %}", "'endif'");
  expect_error("{% break %}", "'break' outside of a loop");
  expect_error("{{ x @ y }}", "unexpected character '@'");
  expect_error("{% raw %}abc", "unclosed 'raw' block");
  expect_error("{{ " + std::string(5000, '(') + std::string(5000, ')') + " }}", "nesting too deep");
  expect_error("{{ " + std::string(5000, '-') + "1 }}", "nesting too deep");
}

TEST(MalformedTemplates, RuntimeErrorsNameTheLine) {
  expect_error("ok\n{{ raise_exception('Roles must alternate') }}", "line 2: Roles must alternate");
  expect_error("{{ undefined_thing.attr }}", "'undefined_thing' is undefined");
  expect_error("{{ 1 / 0 }}", "division by zero");
  expect_error("{{ none + 1 }}", "unsupported operand");
  expect_error("{% set x = 5 %}{% set x.y = 1 %}", "non-namespace");
  expect_error("{% for a, b in [1] %}{% endfor %}", "not iterable");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow");
}

TEST(HostileTemplates, AreStoppedByLimits) {
  expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro recursion deeper than");
  chat::RenderLimits small;
  small.max_steps = 100000;
  expect_error("{% for i in range(100000000) %}{% endfor %}", "range too large", small);
  expect_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "render limit exceeded", small);
  small.max_output_bytes = 1 << 20;
  expect_error("{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}", "exceeds", small);
  expect_error("{{ 'x' * 100000000000 }}", "repetition too large", small);
  chat::RenderLimits small_values;
  small_values.max_value_bytes = 1 << 20;
  expect_error("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "too long",
               small_values);
}

// Issue 16 (9): each of these used to allocate its whole result (gigabytes)
// before a limit fired, or never hit one. With the default limits every one
// must fail with the limit's error, having spent little memory: sizes are
// checked before the allocation they would drive.
TEST(HostileTemplates, LimitsHoldBeforeTheMemoryIsSpent) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% for i in range(10**9) %}{% endfor %}", "range too large"},
      {"{{ range(10**9) | length }}", "range too large"},
      {"{{ 'a' * 10**9 }}", "repetition too large"},
      {"{{ ([0] * 50000000) | length }}", "repetition too large"},
      {"{% set s = 'x' * 10000000 %}{{ ([s] * 100) | length }}", "repetition too large"},
      {"{{ range(50000) | join(',' * 1000000) }}", "join"},
      {"{% set s = 'x' * 10000000 %}{{ [s, s, s, s, s, s, s, s, s, s] | length }}", "list literal"},
      {"{% set ns = namespace(s='x' * 1000000) %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'y' %}{% endfor %}",
       "render limit exceeded"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "'~'"},
      {"{% set ns = namespace(l=['x' * 1000000]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
       "'+'"},
      {"{{ ('a\n' * 1000000) | indent('x' * 100000) }}", "indent"},
      {"{{ ('x' * 1000000) | replace('x', 'y' * 100000) }}", "replace"},
      {"{{ ('x' * 1000000).replace('x', 'y' * 100000) }}", "replace"},
      {"{% for c in 'x' * 50000000 %}{% endfor %}", "characters"},
      {"{{ ('x ' * 30000000).split() | length }}", "split"},
      {"{{ ('x,' * 30000000).split(',') | length }}", "split"},
      {"{% set a = range(1000) | list %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}{{ c | tojson }}", "tojson"},
      {"{% set a = range(1000) | list %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}{{ c }}", "str()"},
      {"{% set a = range(1000) | list %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}{{ c ~ '' }}", "str()"},
      {"{{ strftime_now('%c' * 10000000) }}", "strftime_now"},
      {"{{ ('x' * 50000000)[1:] | length }}", "index"},
  };
  for (const auto& [source, needle] : cases) {
    // Memory is the measure (wall time depends on the machine and on
    // sanitizers): before the fix range(10**9) alone grew the process by 3.3 GB.
    const std::int64_t before = reset_peak_rss_kib();
    const std::string err = error_of(source);
    const std::int64_t grown_mib = (peak_rss_kib() - before) / 1024;
    EXPECT_NE(err.find(needle), std::string::npos) << "template: " << source << "\nerror: " << err;
    EXPECT_NE(err.find("limit"), std::string::npos) << "template: " << source << "\nerror: " << err;
    // A few copies of one value at the 64 MiB limit, never the whole result.
    EXPECT_LT(grown_mib, 400) << "template: " << source;
  }
}

TEST(ChatTemplate, RaiseExceptionKeepsTheMessage) {
  chat::ChatTemplate t("{% if messages[0].role != 'system' %}{{ raise_exception('need a system message') }}{% endif %}");
  chat::ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  try {
    t.render(in);
    FAIL();
  } catch (const chat::TemplateRaised& e) {
    EXPECT_EQ(e.message(), "need a system message");
    EXPECT_EQ(e.line(), 1);
  }
}

TEST(ChatTemplate, MessagesAreNormalizedAsTransformersDoes) {
  // None-valued keys are dropped; reasoning is aliased to thinking and reasoning_content.
  chat::ChatTemplate t("{% for m in messages %}{{ m | tojson }}{% endfor %}");
  chat::ChatInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": null, "reasoning": "r"}])");
  EXPECT_EQ(t.render(in), R"({"thinking": "r", "role": "assistant", "reasoning": "r", "reasoning_content": "r"})");
}

}  // namespace
}  // namespace fp8lm::test
