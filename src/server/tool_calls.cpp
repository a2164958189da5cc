#include "server/tool_calls.h"

#include <random>

#include "common/error.h"
#include "io/json_file.h"

namespace fp8lm::server {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

std::string_view trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "chatcmpl-tool-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return id;
}

// A call's arguments as OpenAI sends them: a JSON object's text. An object, or a string holding
// one (some models write it so); absent: {}. nullopt for anything else.
std::optional<std::string> arguments_text(const Json* v) {
  if (v == nullptr || v->is_null()) return "{}";
  if (v->is_object()) return v->dump();
  if (v->is_string()) {
    const std::optional<Json> inner = io::try_parse_ordered_json(v->get<std::string>());
    if (inner && inner->is_object()) return inner->dump();
  }
  return std::nullopt;
}

// {"name": "f", <args_key>: {...}} -> a call; nullopt when it is not one.
std::optional<ToolCall> json_call(std::string_view text, std::initializer_list<const char*> args_keys) {
  const std::optional<Json> parsed = io::try_parse_ordered_json(text);
  if (!parsed) return std::nullopt;
  const Json& j = *parsed;
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
    return std::nullopt;
  const Json* args = nullptr;
  for (const char* k : args_keys)
    if (j.contains(k)) {
      args = &j[k];
      break;
    }
  const std::optional<std::string> a = arguments_text(args);
  if (!a) return std::nullopt;
  return ToolCall{call_id(), j["name"].get<std::string>(), *a};
}

// The JSON schema of parameter `key` of tool `name`, nullptr when the tools do not say.
const Json* parameter_schema(const Json& tools, const std::string& name, const std::string& key) {
  if (!tools.is_array()) return nullptr;
  for (const Json& t : tools) {
    const Json* f = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (f == nullptr || !f->is_object() || f->value("name", "") != name) continue;
    const Json* props = f->contains("parameters") && (*f)["parameters"].is_object() &&
                                (*f)["parameters"].contains("properties")
                            ? &(*f)["parameters"]["properties"]
                            : nullptr;
    if (props == nullptr || !props->is_object() || !props->contains(key) || !(*props)[key].is_object()) return nullptr;
    return &(*props)[key];
  }
  return nullptr;
}

// A parameter schema's type, "" when it does not say.
std::string type_of(const Json* p) {
  return p != nullptr && p->contains("type") && (*p)["type"].is_string() ? (*p)["type"].get<std::string>() : "";
}

// A string whose schema bounds it (length, pattern, format, enum): in xgrammar's qwen_xml grammar
// (tool_choice's constraint) the whitespace around such a value is formatting, not the value.
bool bounded_string(const Json* p) {
  if (p == nullptr) return false;
  for (const char* k : {"minLength", "maxLength", "pattern", "format", "enum", "const"})
    if (p->contains(k)) return true;
  return false;
}

// Qwen3-Coder's <function=f><parameter=k>\nvalue\n</parameter>…</function>.
std::optional<ToolCall> xml_call(std::string_view body, const Json& tools) {
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kParam = "<parameter=", kParamEnd = "</parameter>";
  size_t at = body.find(kFn);
  if (at == std::string_view::npos || !blank(body.substr(0, at))) return std::nullopt;
  at += kFn.size();
  const size_t name_end = body.find('>', at);
  if (name_end == std::string_view::npos) return std::nullopt;
  const std::string name(trim(body.substr(at, name_end - at)));
  if (name.empty()) return std::nullopt;
  size_t end = body.find(kFnEnd, name_end);
  if (end == std::string_view::npos) end = body.size();  // the last call may end with the output
  std::string_view params = body.substr(name_end + 1, end - name_end - 1);
  Json args = Json::object();
  while (true) {
    const size_t p = params.find(kParam);
    if (p == std::string_view::npos) {
      if (!blank(params)) return std::nullopt;
      break;
    }
    if (!blank(params.substr(0, p))) return std::nullopt;
    const size_t key_end = params.find('>', p);
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(trim(params.substr(p + kParam.size(), key_end - p - kParam.size())));
    const size_t value_end = params.find(kParamEnd, key_end);
    if (key.empty() || value_end == std::string_view::npos) return std::nullopt;
    std::string_view value = params.substr(key_end + 1, value_end - key_end - 1);
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    const Json* schema = parameter_schema(tools, name, key);
    const std::string type = type_of(schema);
    if (type == "string" && bounded_string(schema)) value = trim(value);
    Json v = std::string(value);
    if (type == "integer" || type == "number" || type == "boolean" || type == "object" || type == "array" ||
        type == "null") {
      if (std::optional<Json> parsed = io::try_parse_ordered_json(value)) v = std::move(*parsed);
    }
    args[key] = std::move(v);
    params.remove_prefix(value_end + kParamEnd.size());
  }
  return ToolCall{call_id(), name, args.dump()};
}

}  // namespace

std::string tool_call_structural_tag(ToolCallParser parser, const Json& tools, const std::string& name, bool one_call) {
  if (parser == ToolCallParser::kNone)
    throw Error("tool_choice \"required\" and named functions need the server's --tool-call-parser (the calls' format)");
  Json tags = Json::array();
  for (const Json& t : tools) {
    const Json& f = t["function"];
    const std::string fn = f["name"].get<std::string>();
    if (!name.empty() && fn != name) continue;
    Json params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : Json{{"type", "object"}};
    const std::string quoted = Json(fn).dump();  // the name as a JSON string
    // The arguments as JSON with at most one whitespace character in a row ("a": 1, or "a":1): a
    // small model given any whitespace can spend its tokens on it.
    const Json json_args = {{"type", "json_schema"}, {"json_schema", params}, {"max_whitespace_cnt", 1}};
    Json tag = {{"type", "tag"}};
    switch (parser) {
      case ToolCallParser::kHermes:  // <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
        tag["begin"] = "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
        tag["content"] = json_args;
        tag["end"] = "}\n</tool_call>";
        break;
      case ToolCallParser::kLlama3Json:  // {"name": "f", "parameters": {...}}, several separated by "; "
        tag["begin"] = "{\"name\": " + quoted + ", \"parameters\": ";
        tag["content"] = json_args;
        tag["end"] = "}";
        break;
      case ToolCallParser::kQwen3:  // <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n…</function>\n</tool_call>
        tag["begin"] = "<tool_call>\n<function=" + fn + ">\n";
        tag["content"] = json_args;  // xml_call trims the formatting whitespace of bounded strings
        tag["content"]["style"] = "qwen_xml";
        tag["end"] = "</function>\n</tool_call>";
        break;
      case ToolCallParser::kNone: break;
    }
    tags.push_back(std::move(tag));
  }
  if (tags.empty()) throw Error("tool_choice: no tool named '" + name + "' in tools");
  const Json format = {{"type", "tags_with_separator"},
                       {"tags", std::move(tags)},
                       {"separator", parser == ToolCallParser::kLlama3Json ? "; " : "\n"},
                       {"at_least_one", true},
                       {"stop_after_first", one_call || !name.empty()}};
  return Json{{"type", "structural_tag"}, {"format", format}}.dump();
}

namespace {

// <tool_call>…</tool_call> blocks (hermes, qwen3): the last may be unclosed at the end.
ToolCallOutput tagged_calls(ToolCallParser parser, const std::string& text, const Json& tools) {
  size_t pos = text.find(kCallOpen);
  if (pos == std::string::npos) return {text, {}};
  ToolCallOutput out;
  const std::string_view before = std::string_view(text).substr(0, pos);
  if (!blank(before)) out.content = std::string(before);
  while (pos != std::string::npos) {
    const size_t start = pos + kCallOpen.size();
    const size_t end = text.find(kCallClose, start);
    const std::string_view body = std::string_view(text).substr(start, end == std::string::npos ? text.npos : end - start);
    std::optional<ToolCall> call = parser == ToolCallParser::kQwen3 ? xml_call(body, tools)
                                                                    : json_call(trim(body), {"arguments", "parameters"});
    if (!call) return {text, {}};
    out.calls.push_back(std::move(*call));
    if (end == std::string::npos) break;
    pos = text.find(kCallOpen, end + kCallClose.size());
  }
  return out;
}

// Where the JSON object starting at text[at] == '{' ends (one past its '}'), npos when it does not.
size_t object_end(std::string_view text, size_t at) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Llama 3's JSON calls: the whole output, after an optional <|python_tag|>, objects separated by ';'.
ToolCallOutput json_calls(const std::string& text) {
  std::string_view s = trim(text);
  if (s.substr(0, kPythonTag.size()) == kPythonTag) s = trim(s.substr(kPythonTag.size()));
  if (s.empty() || s.front() != '{') return {text, {}};
  ToolCallOutput out;
  while (!s.empty()) {
    if (s.front() != '{') return {text, {}};
    const size_t end = object_end(s, 0);
    if (end == std::string_view::npos) return {text, {}};
    std::optional<ToolCall> call = json_call(s.substr(0, end), {"parameters", "arguments"});
    if (!call) return {text, {}};
    out.calls.push_back(std::move(*call));
    s = trim(s.substr(end));
    if (!s.empty() && s.front() == ';') s = trim(s.substr(1));
  }
  return out;
}

// The longest suffix of `s` that is a proper prefix of `marker` (what may still become it).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ToolCallParser parse_tool_call_parser(const std::string& name) {
  if (name.empty() || name == "none") return ToolCallParser::kNone;
  if (name == "hermes") return ToolCallParser::kHermes;
  if (name == "llama3_json") return ToolCallParser::kLlama3Json;
  if (name == "qwen3") return ToolCallParser::kQwen3;
  throw Error("--tool-call-parser: '" + name + "' is not one of hermes, llama3_json, qwen3");
}

ToolCallOutput extract_tool_calls(ToolCallParser parser, const std::string& text, const Json& tools) {
  switch (parser) {
    case ToolCallParser::kNone: return {text, {}};
    case ToolCallParser::kHermes:
    case ToolCallParser::kQwen3: return tagged_calls(parser, text, tools);
    case ToolCallParser::kLlama3Json: return json_calls(text);
  }
  return {text, {}};
}

ToolCallStream::ToolCallStream(ToolCallParser parser, Json tools) : parser_(parser), tools_(std::move(tools)) {}

std::string ToolCallStream::push(std::string_view text) {
  held_ += text;
  if (parser_ == ToolCallParser::kNone) {
    std::string out = std::move(held_);
    held_.clear();
    emitted_ += out;
    return out;
  }
  if (in_call_) return {};
  std::string out;
  if (parser_ == ToolCallParser::kLlama3Json) {
    // Decided by the output's first non-blank characters: a call (held to the end), or content
    // throughout (given out as it comes: emitted_ is not empty then).
    const std::string_view s = trim(held_);
    const bool undecided = emitted_.empty();
    if (undecided && !s.empty() && (s.front() == '{' || s.substr(0, kPythonTag.size()) == kPythonTag)) {
      in_call_ = true;
    } else if (!undecided || (!s.empty() && kPythonTag.substr(0, s.size()) != s)) {
      out = std::move(held_);
      held_.clear();
    }
  } else {
    const size_t at = held_.find(kCallOpen);
    if (at != std::string::npos) {
      out = held_.substr(0, at);
      held_.erase(0, at);
      in_call_ = true;
    } else {
      const size_t keep = partial_marker(held_, kCallOpen);
      out = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
    }
  }
  emitted_ += out;
  return out;
}

ToolCallOutput ToolCallStream::finish() {
  ToolCallOutput out;
  if (in_call_) {
    ToolCallOutput whole = extract_tool_calls(parser_, emitted_ + held_, tools_);
    if (!whole.calls.empty()) {
      out.calls = std::move(whole.calls);
      held_.clear();
      return out;  // the content before the calls was given out already
    }
  }
  if (!held_.empty()) out.content = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace fp8lm::server
