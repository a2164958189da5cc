// --tool-call-parser: tool calls in a chat model's output, returned as OpenAI
// `tool_calls` — the formats vLLM's parsers of the same names read:
//
//   hermes:      <tool_call>{"name": "f", "arguments": {...}}</tool_call>, any number,
//                content = the text before the first (Hermes 2 Pro, Qwen2.5 / Qwen3).
//   llama3_json: the whole output is {"name": "f", "parameters": {...}} (or "arguments"),
//                optionally after <|python_tag|>, several separated by ';' (Llama 3.1 / 3.2).
//   qwen3:       Qwen3-Coder's XML: <tool_call><function=f><parameter=k>value</parameter>
//                …</function></tool_call>; each value converted by the tool's JSON schema
//                (integer, number, boolean, object, array: parsed as JSON; else a string).
//
// Output whose calls do not parse (bad JSON, no name, an unclosed tag before
// more text) is returned whole as content, never an error. Streaming: text
// before a call's start is content at once; from the start on it is held back
// and parsed at the end, so a stream's deltas add up to the whole response.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp8lm::server {

enum class ToolCallParser : uint8_t { kNone, kHermes, kLlama3Json, kQwen3 };

// "" or "none" -> kNone, "hermes", "llama3_json", "qwen3"; throws fp8lm::Error naming the flag otherwise.
ToolCallParser parse_tool_call_parser(const std::string& name);

struct ToolCall {
  std::string id;         // "chatcmpl-tool-" + 24 hex digits
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `arguments`)
};

struct ToolCallOutput {
  std::optional<std::string> content;  // none: no text outside the calls
  std::vector<ToolCall> calls;          // empty: the output is content only
};

// `tools`: the request's tool list (OpenAI's [{"type": "function", "function": {...}}]), for
// qwen3's value types.
ToolCallOutput extract_tool_calls(ToolCallParser parser, const std::string& text, const nlohmann::ordered_json& tools);

// tool_choice "required" / a named function (structured outputs): an xgrammar structural tag
// (JSON text) whose language is calls in `parser`'s format — one or more of any tool in `tools`
// (one only with `one_call`: parallel_tool_calls false), or exactly one of the tool `name` when it
// is not empty — each call's arguments valid under its
// tool's `parameters` schema (an object of any properties where it gives none). Nothing else: no
// text before, between or after the calls but the format's separators. Throws fp8lm::Error for
// kNone (no format to constrain to).
std::string tool_call_structural_tag(ToolCallParser parser, const nlohmann::ordered_json& tools, const std::string& name,
                                     bool one_call);

class ToolCallStream {
 public:
  ToolCallStream(ToolCallParser parser, nlohmann::ordered_json tools);
  // The next piece of the output; returns the content that is final now.
  std::string push(std::string_view text);
  // The end: the calls, and as content what was held back when they did not parse.
  ToolCallOutput finish();

 private:
  ToolCallParser parser_;
  nlohmann::ordered_json tools_;
  std::string emitted_;  // content already given out
  std::string held_;     // from a possible call start on
  bool in_call_ = false;
};

}  // namespace fp8lm::server
