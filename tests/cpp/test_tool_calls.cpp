// --tool-call-parser (server/tool_calls.h): each format's calls parsed into OpenAI's shape
// (name, arguments as JSON object text), the content around them, malformed calls returned as
// content, and streaming that gives the same result piece by piece, wherever the pieces split.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "server/tool_calls.h"

namespace fp8lm::test {
namespace {

using server::ToolCallOutput;
using server::ToolCallParser;
using Json = nlohmann::ordered_json;

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
    "metric": {"type": "boolean"}, "hours": {"type": "array"}, "note": {"type": "string"}}}}}])");

ToolCallOutput extract(ToolCallParser p, const std::string& text) { return server::extract_tool_calls(p, text, kTools); }

// The same output streamed in pieces of every size from 1 to 7 bytes: the content deltas add up
// to the whole output's content (or the whole text when no call parses) and the calls are equal.
void expect_streams_alike(ToolCallParser p, const std::string& text) {
  const ToolCallOutput whole = extract(p, text);
  for (size_t piece = 1; piece <= 7; ++piece) {
    SCOPED_TRACE("pieces of " + std::to_string(piece));
    server::ToolCallStream s(p, kTools);
    std::string content;
    for (size_t at = 0; at < text.size(); at += piece) content += s.push(std::string_view(text).substr(at, piece));
    const ToolCallOutput end = s.finish();
    if (end.content) content += *end.content;
    ASSERT_EQ(end.calls.size(), whole.calls.size());
    for (size_t i = 0; i < end.calls.size(); ++i) {
      EXPECT_EQ(end.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments);
    }
    EXPECT_EQ(content, whole.calls.empty() ? text : whole.content.value_or(""));
  }
}

TEST(ToolCalls, Hermes) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
      "</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}</tool_call>";
  const ToolCallOutput out = extract(ToolCallParser::kHermes, text);
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.content, "Let me look.\n");
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(out.calls[1].arguments, R"({"city":"Oslo"})");  // arguments written as a string holding JSON
  EXPECT_EQ(out.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(out.calls[0].id.size(), 14u + 24u);
  EXPECT_NE(out.calls[0].id, out.calls[1].id);
  expect_streams_alike(ToolCallParser::kHermes, text);
  // No text before the call: no content; an unclosed last call at the end still counts.
  const ToolCallOutput bare = extract(ToolCallParser::kHermes, "<tool_call>{\"name\": \"f\"}");
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_FALSE(bare.content.has_value());
  EXPECT_EQ(bare.calls[0].arguments, "{}");
  expect_streams_alike(ToolCallParser::kHermes, "plain text with < and <tool but no call");
}

TEST(ToolCalls, Llama3Json) {
  const std::string text = R"({"name": "get_weather", "parameters": {"city": "Paris", "note": "a {brace} \"quote\""}})";
  const ToolCallOutput out = extract(ToolCallParser::kLlama3Json, text);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_FALSE(out.content.has_value());
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris","note":"a {brace} \"quote\""})");
  expect_streams_alike(ToolCallParser::kLlama3Json, text);
  const std::string two = "<|python_tag|>{\"name\": \"a\", \"arguments\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}";
  const ToolCallOutput both = extract(ToolCallParser::kLlama3Json, two);
  ASSERT_EQ(both.calls.size(), 2u);
  EXPECT_EQ(both.calls[1].name, "b");
  EXPECT_EQ(both.calls[1].arguments, R"({"x":1})");
  expect_streams_alike(ToolCallParser::kLlama3Json, two);
  // Text first: content, even with JSON later.
  expect_streams_alike(ToolCallParser::kLlama3Json, "Sure: {\"name\": \"a\", \"parameters\": {}}");
  EXPECT_TRUE(extract(ToolCallParser::kLlama3Json, "Sure: {\"name\": \"a\"}").calls.empty());
}

TEST(ToolCalls, Qwen3Xml) {
  const std::string text =
      "I will check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=hours>\n[1, 2]\n"
      "</parameter>\n<parameter=note>\n42\n</parameter>\n</function>\n</tool_call>";
  const ToolCallOutput out = extract(ToolCallParser::kQwen3, text);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.content, "I will check.\n");
  EXPECT_EQ(out.calls[0].name, "get_weather");
  // Typed by the tool's schema: note is a string even though it looks like a number.
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"San Francisco","days":3,"metric":true,"hours":[1,2],"note":"42"})");
  expect_streams_alike(ToolCallParser::kQwen3, text);
}

TEST(ToolCalls, MalformedCallsAreContent) {
  const std::pair<ToolCallParser, const char*> cases[] = {
      {ToolCallParser::kHermes, "<tool_call>{\"name\": get_weather}</tool_call>"},
      {ToolCallParser::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>"},
      {ToolCallParser::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"},
      {ToolCallParser::kHermes, "ok <tool_call>{\"name\": \"f\"}</tool_call> <tool_call>oops</tool_call>"},
      {ToolCallParser::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"x\": 1}"},
      {ToolCallParser::kLlama3Json, "{\"name\": \"f\"} and then text"},
      {ToolCallParser::kQwen3, "<tool_call>\n<parameter=city>\nParis\n</parameter>\n</tool_call>"},
      {ToolCallParser::kQwen3, "<tool_call>\n<function=f>\n<parameter=city>\nParis\n</function>\n</tool_call>"},
  };
  for (const auto& [parser, text] : cases) {
    SCOPED_TRACE(text);
    const ToolCallOutput out = extract(parser, text);
    EXPECT_TRUE(out.calls.empty());
    EXPECT_EQ(out.content, text);
    expect_streams_alike(parser, text);
  }
}

// A model's output is untrusted JSON too: arguments nested 20,000 deep (a
// prompt can ask for them) are not a call but content, and nothing recurses
// through them (dump() of the parsed tree used to overflow the stack).
TEST(ToolCalls, DeeplyNestedArgumentsAreContent) {
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  const std::string within = std::string(100, '[') + std::string(100, ']');
  for (const ToolCallParser parser : {ToolCallParser::kHermes, ToolCallParser::kLlama3Json}) {
    const std::string open = parser == ToolCallParser::kHermes ? "<tool_call>" : "";
    const std::string close = parser == ToolCallParser::kHermes ? "</tool_call>" : "";
    const std::string text = open + R"({"name": "get_weather", "arguments": {"hours": )" + deep + "}}" + close;
    const ToolCallOutput out = extract(parser, text);
    EXPECT_TRUE(out.calls.empty());
    EXPECT_EQ(out.content, text);
    const std::string as_string = open + R"({"name": "get_weather", "arguments": ")" + deep + R"("})" + close;
    EXPECT_TRUE(extract(parser, as_string).calls.empty());
    const ToolCallOutput ok =
        extract(parser, open + R"({"name": "get_weather", "arguments": {"hours": )" + within + "}}" + close);
    ASSERT_EQ(ok.calls.size(), 1u);
    EXPECT_EQ(ok.calls[0].arguments, R"({"hours":)" + within + "}");
  }
  const std::string qwen = "<tool_call>\n<function=get_weather>\n<parameter=hours>\n" + deep +
                           "\n</parameter>\n</function>\n</tool_call>";
  const ToolCallOutput q = extract(ToolCallParser::kQwen3, qwen);  // an array parameter too deep: kept as text
  ASSERT_EQ(q.calls.size(), 1u);
  EXPECT_EQ(q.calls[0].arguments, R"({"hours":")" + deep + R"("})");
}

TEST(ToolCalls, ParserNames) {
  EXPECT_EQ(server::parse_tool_call_parser(""), ToolCallParser::kNone);
  EXPECT_EQ(server::parse_tool_call_parser("hermes"), ToolCallParser::kHermes);
  EXPECT_EQ(server::parse_tool_call_parser("llama3_json"), ToolCallParser::kLlama3Json);
  EXPECT_EQ(server::parse_tool_call_parser("qwen3"), ToolCallParser::kQwen3);
  try {
    server::parse_tool_call_parser("mistral");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tool-call-parser: 'mistral'"), std::string::npos);
  }
}

}  // namespace
}  // namespace fp8lm::test
