#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "io/json_value.h"
#include "server/structured_request.h"

namespace fp8lm::server {
namespace {

std::string type_name(const Json& v) { return io::json_kind_name(v); }

// A field: absent and null are the same ("not given").
const Json* field(const Json& body, const char* name) { return io::json_given(body, name); }

std::optional<double> get_number(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(name, std::string(name) + " must be a number, not " + type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d)) bad(name, std::string(name) + " must be a finite number");
  return d;
}

std::optional<int64_t> get_int(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) bad(name, std::string(name) + " is too large");
    return int64_t(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  // 2.0 is an integer to Python clients' eyes; 2.5 is not.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
  }
  bad(name, std::string(name) + " must be an integer, not " + type_name(*v));
}

std::optional<bool> get_bool(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name, std::string(name) + " must be a boolean, not " + type_name(*v));
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name, std::string(name) + " must be a string, not " + type_name(*v));
  return v->get<std::string>();
}

std::string show(double v) {
  Json j = v;
  return j.dump();
}

// A value in an error message: scalars as JSON, containers by their type only
// (an offending value may be megabytes of nested lists).
std::string brief(const Json& v) {
  if (v.is_array() || v.is_object()) return type_name(v);
  std::string s = dump(v);
  if (s.size() > 64) s = s.substr(0, 60) + "...";
  return s;
}

// A float parameter within [lo, hi] (lo excluded when lo_open). The sampler
// holds 32-bit floats, so the value must also stay in range once narrowed:
// 1e308 would become inf and 1e-50 would become 0.
void float_param(const Json& body, const char* name, float& out, double lo, double hi, bool lo_open) {
  const std::optional<double> v = get_number(body, name);
  if (!v) return;
  hi = std::min(hi, double(std::numeric_limits<float>::max()));
  const float f = float(*v);
  auto in_range = [&](double x) { return (lo_open ? x > lo : x >= lo) && x <= hi; };
  if (!in_range(*v) || !in_range(double(f))) {
    const std::string range = std::string("in ") + (lo_open ? "(" : "[") + show(lo) + ", " + show(hi) + "]";
    std::string got = show(*v);
    if (in_range(*v)) got += " (" + show(double(f)) + " as a 32-bit float)";
    bad(name, std::string(name) + " must be " + range + ", got " + got);
  }
  out = f;
}

void reject_unsupported(const Json& body, const char* name, const std::string& why) {
  if (const Json* v = field(body, name)) {
    const bool empty = (v->is_array() || v->is_object() || v->is_string()) && v->empty();
    const bool off = v->is_boolean() && !v->get<bool>();
    if (!empty && !off) bad(name, std::string(name) + " is not supported by fp8lm" + (why.empty() ? "" : ": " + why));
  }
}

// The fields both endpoints share.
void parse_common(const Json& body, ApiRequest& r) {
  if (const auto m = get_string(body, "model")) r.model = *m;
  engine::SamplingParams& p = r.params;
  float_param(body, "temperature", p.temperature, 0.0, std::numeric_limits<double>::infinity(), false);
  float_param(body, "top_p", p.top_p, 0.0, 1.0, true);
  float_param(body, "min_p", p.min_p, 0.0, 1.0, false);
  float_param(body, "presence_penalty", p.presence_penalty, -2.0, 2.0, false);
  float_param(body, "frequency_penalty", p.frequency_penalty, -2.0, 2.0, false);
  float_param(body, "repetition_penalty", p.repetition_penalty, 0.0, std::numeric_limits<double>::infinity(), true);
  if (const auto k = get_int(body, "top_k")) {
    if (*k < -1 || *k > std::numeric_limits<int32_t>::max())
      bad("top_k", "top_k must be -1 or 0 (off) or a positive count, got " + std::to_string(*k));
    p.top_k = int32_t(*k);
  }
  if (const auto s = get_int(body, "seed")) p.seed = uint64_t(*s);  // a negative seed is as good as any (two's complement)
  if (const auto e = get_bool(body, "ignore_eos")) p.ignore_eos = *e;
  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& s : *stop) {
        if (!s.is_string()) bad("stop", "stop must be a string or a list of strings, found " + type_name(s) + " in the list");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", "stop must be a string or a list of strings, not " + type_name(*stop));
    }
    for (const std::string& s : p.stop)
      if (s.empty()) bad("stop", "stop strings must not be empty");
  }
  if (const Json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) bad("stop_token_ids", "stop_token_ids must be a list of token ids");
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
        bad("stop_token_ids", "stop_token_ids must hold token ids >= 0, found " + brief(id));
      p.stop_token_ids.push_back(int32_t(id.get<int64_t>()));
    }
  }
  if (const auto n = get_int(body, "n")) {
    if (*n < 1 || *n > kMaxChoices)
      bad("n", "n must be in [1, " + std::to_string(kMaxChoices) + "], got " + std::to_string(*n));
    r.n = int32_t(*n);
  }
  if (const auto b = get_int(body, "best_of"))
    if (*b != r.n) bad("best_of", "best_of is not supported by fp8lm (only best_of = n)");
  if (const auto s = get_bool(body, "stream")) r.stream = *s;
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "stream_options must be an object, not " + type_name(*so));
    if (!r.stream) bad("stream_options", "stream_options is only allowed when stream is true");
    if (const auto u = get_bool(*so, "include_usage")) r.include_usage = *u;
  }
  reject_unsupported(body, "logit_bias", "");
  reject_unsupported(body, "prompt_logprobs", "");
  // Structured outputs: response_format, structured_outputs (the schema or grammar is checked when
  // the server compiles it).
  if (auto s = parse_structured_outputs(body)) {
    r.grammar = std::move(s->spec);
    r.grammar_param = std::move(s->param);
  }
  // Caught here with the parameter's name rather than later by the sampler.
  engine::SamplingParams check = p;
  check.max_tokens = 1;
  check.validate();
}

void set_max_tokens(const Json& body, const char* name, ApiRequest& r) {
  if (const auto m = get_int(body, name)) {
    if (*m < 1) bad(name, std::string(name) + " must be at least 1, got " + std::to_string(*m));
    r.max_tokens = *m;
    r.max_tokens_param = name;
  }
}

// A token id of a prompt.
int32_t prompt_id(const Json& v) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    bad("prompt", "prompt token ids must be integers >= 0, found " + brief(v));
  return int32_t(v.get<int64_t>());
}

PromptInput ids_prompt(const Json& list) {
  PromptInput p;
  p.is_text = false;
  for (const Json& v : list) p.ids.push_back(prompt_id(v));
  if (p.ids.empty()) bad("prompt", "a prompt of token ids must not be empty");
  return p;
}

// A message's content: a string, null, or a list of text parts (joined with "\n", as vLLM).
Json flatten_content(const Json& content, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) bad("messages", where + " must be a string or a list of content parts, not " + type_name(content));
  std::string text;
  bool first = true;
  for (const Json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad("messages", where + ": each content part must be an object with a \"type\"");
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad("messages", where + ": content parts of type '" + type + "' are not supported (text only)");
    if (!part.contains("text") || !part["text"].is_string()) bad("messages", where + ": a text part needs a string \"text\"");
    if (!first) text += "\n";
    text += part["text"].get<std::string>();
    first = false;
  }
  return text;
}

}  // namespace

Json parse_body(std::string_view body) {
  const Json j = parse_json_text(body, "the request body", "");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object, not " + type_name(j));
  return j;
}

ApiRequest parse_completion_request(const Json& body, const engine::SamplingParams& defaults) {
  ApiRequest r;
  r.params = defaults;
  r.endpoint = Endpoint::kCompletions;
  const Json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "prompt is required");
  if (prompt->is_string()) {
    r.prompts.push_back({true, prompt->get<std::string>(), {}});
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad("prompt", "prompt must not be an empty list");
    const Json& first = prompt->front();
    if (first.is_number()) {
      r.prompts.push_back(ids_prompt(*prompt));
    } else {
      for (const Json& p : *prompt) {
        if (p.is_string()) r.prompts.push_back({true, p.get<std::string>(), {}});
        else if (p.is_array()) r.prompts.push_back(ids_prompt(p));
        else bad("prompt", "prompt must be a string, a list of token ids, or a list of either; found " + type_name(p));
      }
    }
  } else {
    bad("prompt", "prompt must be a string, a list of token ids, or a list of either; not " + type_name(*prompt));
  }
  parse_common(body, r);
  set_max_tokens(body, "max_tokens", r);
  if (const auto lp = get_int(body, "logprobs")) {
    if (*lp < 0 || *lp > kMaxLogprobs)
      bad("logprobs", "logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " + std::to_string(*lp));
    r.logprobs = int32_t(*lp);
  }
  if (const auto echo = get_bool(body, "echo"); echo && *echo) bad("echo", "echo is not supported by fp8lm");
  reject_unsupported(body, "suffix", "");
  return r;
}

ApiRequest parse_chat_request(const Json& body, const engine::SamplingParams& defaults) {
  ApiRequest r;
  r.params = defaults;
  r.endpoint = Endpoint::kChat;
  const Json* messages = field(body, "messages");
  if (!messages) bad("messages", "messages is required");
  if (!messages->is_array()) bad("messages", "messages must be a list of messages, not " + type_name(*messages));
  if (messages->empty()) bad("messages", "messages must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad("messages", where + " must be an object, not " + type_name(m));
    if (!m.contains("role") || !m["role"].is_string()) bad("messages", where + " needs a string \"role\"");
    Json copy = m;
    if (m.contains("content")) copy["content"] = flatten_content(m["content"], i);
    // An assistant's earlier calls: templates read their arguments as objects (as vLLM gives them).
    if (const Json* calls = field(m, "tool_calls")) {
      if (!calls->is_array()) bad("messages", where + ".tool_calls must be a list");
      for (size_t c = 0; c < calls->size(); ++c) {
        const Json& call = (*calls)[c];
        const std::string at = where + ".tool_calls[" + std::to_string(c) + "]";
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
            !call["function"].contains("name") || !call["function"]["name"].is_string())
          bad("messages", at + " must be {\"type\": \"function\", \"function\": {\"name\": …, \"arguments\": …}}");
        const Json& args = call["function"].contains("arguments") ? call["function"]["arguments"] : Json(nullptr);
        if (args.is_string()) {
          // JSON inside a string: parsed again, under the same bound as the body.
          Json parsed = parse_json_text(args.get<std::string>(), at + ".function.arguments", "messages");
          if (!parsed.is_object()) bad("messages", at + ".function.arguments must be a JSON object (as text)");
          copy["tool_calls"][c]["function"]["arguments"] = std::move(parsed);
        } else if (!args.is_object() && !args.is_null()) {
          bad("messages", at + ".function.arguments must be a JSON object or its text");
        }
      }
    }
    r.messages.push_back(std::move(copy));
  }
  parse_common(body, r);
  set_max_tokens(body, "max_tokens", r);
  set_max_tokens(body, "max_completion_tokens", r);  // the newer name wins
  const std::optional<bool> logprobs = get_bool(body, "logprobs");
  const std::optional<int64_t> top = get_int(body, "top_logprobs");
  if (top) {
    if (*top < 0 || *top > kMaxLogprobs)
      bad("top_logprobs", "top_logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " + std::to_string(*top));
    if (!logprobs.value_or(false)) bad("top_logprobs", "top_logprobs requires logprobs to be true");
  }
  if (logprobs.value_or(false)) r.logprobs = int32_t(top.value_or(0));
  if (const auto g = get_bool(body, "add_generation_prompt")) r.add_generation_prompt = *g;
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "chat_template_kwargs must be an object");
    // Extra variables for the template, never the ones the request itself sets.
    for (const char* reserved : {"messages", "add_generation_prompt", "tools", "documents", "bos_token", "eos_token"})
      if (kw->contains(reserved))
        bad("chat_template_kwargs", std::string("chat_template_kwargs may not set '") + reserved +
                                        "': the request's own fields and the tokenizer give it");
    r.chat_template_kwargs = *kw;
  }
  // vLLM takes a template per request only behind --trust-request-chat-template;
  // fp8lm renders with the model's template or --chat-template alone.
  reject_unsupported(body, "chat_template",
                     "the server renders with the model's chat template or the one given by --chat-template");
  if (const auto c = get_bool(body, "continue_final_message"); c && *c)
    bad("continue_final_message", "continue_final_message is not supported by fp8lm");
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "tools must be a list of tools, not " + type_name(*tools));
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        bad("tools", at + " must be {\"type\": \"function\", \"function\": {…}} (function tools only)");
      const Json* f = field(t, "function");
      if (f == nullptr || !f->is_object()) bad("tools", at + ".function must be an object");
      const Json* name = field(*f, "name");
      if (name == nullptr || !name->is_string() || name->get<std::string>().empty())
        bad("tools", at + ".function.name must be a non-empty string");
      if (const Json* params = field(*f, "parameters"); params && !params->is_object())
        bad("tools", at + ".function.parameters must be a JSON schema object");
      if (const Json* d = field(*f, "description"); d && !d->is_string())
        bad("tools", at + ".function.description must be a string");
    }
    if (!tools->empty()) r.tools = *tools;
  }
  std::string choice = r.tools.is_null() ? "none" : "auto";
  if (const Json* tc = field(body, "tool_choice")) {
    if (tc->is_string() && (*tc == "none" || *tc == "auto" || *tc == "required")) {
      choice = tc->get<std::string>();
    } else if (tc->is_object()) {
      // {"type": "function", "function": {"name": "f"}}: a call of f.
      const Json* f = field(*tc, "function");
      const Json* name = f != nullptr ? field(*f, "name") : nullptr;
      if (field(*tc, "type") == nullptr || (*tc)["type"] != "function" || name == nullptr || !name->is_string())
        bad("tool_choice", "a named tool_choice must be {\"type\": \"function\", \"function\": {\"name\": …}}");
      choice = "named";
      r.tool_choice_name = name->get<std::string>();
      bool known = false;
      if (r.tools.is_array())
        for (const Json& t : r.tools) known = known || t["function"]["name"] == r.tool_choice_name;
      if (!known) bad("tool_choice", "tool_choice names the function '" + r.tool_choice_name + "', which is not in tools");
    } else {
      bad("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or a named function, not " + brief(*tc));
    }
  }
  if (choice != "none" && r.tools.is_null()) bad("tool_choice", "tool_choice \"" + choice + "\" needs tools");
  // "required" and a named function constrain the output to calls (the server builds the grammar
  // in its --tool-call-parser's format); either way the calls are parsed.
  r.tool_choice_required = choice == "required" || choice == "named";
  if (r.tool_choice_required && r.grammar)
    bad("tool_choice", "tool_choice \"" + choice + "\" constrains the output to tool calls: it cannot take " +
                           r.grammar_param + " too");
  r.parse_tool_calls = choice != "none";
  if (const auto p = get_bool(body, "parallel_tool_calls")) r.parallel_tool_calls = *p;
  return r;
}

int32_t resolve_max_tokens(const ApiRequest& r, int64_t prompt_tokens, int64_t max_model_len, int64_t cache_tokens) {
  const char* what = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (prompt_tokens >= max_model_len) {
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(max_model_len) +
                       " tokens. However, your " + what + " has " + std::to_string(prompt_tokens) +
                       " tokens, which leaves no room to generate. Please reduce the length of the " + what + ".",
                   what, "context_length_exceeded");
  }
  if (r.max_tokens) {
    if (*r.max_tokens > max_model_len - prompt_tokens) {  // written so that no sum can overflow
      // The prompt fits (checked above): the completion asked for is what is too long.
      throw ApiError(400,
                     "This model's maximum context length is " + std::to_string(max_model_len) +
                         " tokens. However, you requested " +
                         (*r.max_tokens > (int64_t(1) << 40) ? std::string("more") : std::to_string(prompt_tokens + *r.max_tokens)) +
                         " tokens (" + std::to_string(prompt_tokens) + " in the " + what + ", " +
                         std::to_string(*r.max_tokens) + " in the completion). Please reduce the length of the " +
                         what + " or completion.",
                     r.max_tokens_param, "context_length_exceeded");
    }
    return int32_t(*r.max_tokens);
  }
  int64_t m = r.endpoint == Endpoint::kChat ? max_model_len - prompt_tokens : std::min<int64_t>(16, max_model_len - prompt_tokens);
  // The last generated token is never cached: prompt + max_tokens - 1 positions.
  if (cache_tokens > 0) m = std::min(m, cache_tokens - prompt_tokens + 1);
  return int32_t(std::max<int64_t>(1, m));
}

int64_t expanded_bytes(const ApiRequest& r, const std::vector<int64_t>& prompt_tokens) {
  // What an engine request copies per choice (the prompt ids, the stop
  // strings with their std::string headers, the stop ids), plus a fixed
  // allowance for the request itself. No sum can overflow: every term is
  // bounded by the body's size (or max_model_len) times a small constant.
  int64_t shared = 1024 + int64_t(r.params.stop_token_ids.size() * sizeof(int32_t));
  for (const std::string& s : r.params.stop) shared += int64_t(sizeof(std::string) + s.size());
  int64_t per_n = 0;
  for (const int64_t t : prompt_tokens) per_n += shared + t * int64_t(sizeof(int32_t));
  return per_n * int64_t(r.n);
}

void check_expanded_size(const ApiRequest& r, const std::vector<int64_t>& prompt_tokens) {
  const int64_t bytes = expanded_bytes(r, prompt_tokens);
  if (bytes <= kMaxExpandedBytes) return;
  const auto mib = [](int64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
  throw ApiError(400,
                 "n = " + std::to_string(r.n) + " × " + std::to_string(prompt_tokens.size()) +
                     " prompt(s) with their stop lists would take " + mib(bytes) +
                     " MiB, more than the " + mib(kMaxExpandedBytes) +
                     " MiB a request may expand to; lower n, or send fewer prompts or stops",
                 r.n > 1 ? "n" : "prompt");
}

// ---- responses -----------------------------------------------------------------

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, std::optional<int64_t> cached_tokens) {
  Json u = Json::object();
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  if (cached_tokens) u["prompt_tokens_details"] = Json{{"cached_tokens", *cached_tokens}};
  return u;
}

double json_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

Json completion_logprobs(const std::vector<engine::SampleResult>& lps, int32_t top_n, const TokenText& text,
                         int64_t& offset) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const engine::SampleResult& r : lps) {
    const std::string t = text(r.token);
    tokens.push_back(t);
    token_lps.push_back(json_logprob(r.logprob));
    Json top = Json::object();
    for (size_t i = 0; i < r.top.size() && int32_t(i) < top_n; ++i) {
      const std::string alt = text(r.top[i].token);
      if (!top.contains(alt)) top[alt] = json_logprob(r.top[i].logprob);
    }
    if (!top.contains(t)) top[t] = json_logprob(r.logprob);  // the chosen token always appears (vLLM)
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += int64_t(t.size());
  }
  Json out = Json::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_lps);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

namespace {
Json chat_token(const std::string& t, float lp) {
  Json j = Json::object();
  j["token"] = t;
  j["logprob"] = json_logprob(lp);
  Json bytes = Json::array();
  for (const char c : t) bytes.push_back(int(uint8_t(c)));
  j["bytes"] = std::move(bytes);
  return j;
}
}  // namespace

Json chat_logprobs(const std::vector<engine::SampleResult>& lps, int32_t top_n, const TokenText& text) {
  Json content = Json::array();
  for (const engine::SampleResult& r : lps) {
    Json entry = chat_token(text(r.token), r.logprob);
    Json top = Json::array();
    for (size_t i = 0; i < r.top.size() && int32_t(i) < top_n; ++i) top.push_back(chat_token(text(r.top[i].token), r.top[i].logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  Json out = Json::object();
  out["content"] = std::move(content);
  return out;
}

TokenizeRequest parse_tokenize_request(const Json& body) {
  TokenizeRequest t;
  if (const auto m = get_string(body, "model")) t.model = *m;
  const bool has_prompt = field(body, "prompt") != nullptr, has_messages = field(body, "messages") != nullptr;
  if (has_prompt == has_messages)
    bad(has_prompt ? "messages" : "prompt", "give either prompt (a text) or messages (a chat), " +
                                               std::string(has_prompt ? "not both" : "one of them is required"));
  t.chat = has_messages;
  if (t.chat) {
    t.chat_request = parse_chat_request(body);
    t.add_special_tokens = false;  // the template writes the special tokens the model expects
  } else {
    const auto p = get_string(body, "prompt");
    if (!p) bad("prompt", "prompt must be a string, not " + type_name(*field(body, "prompt")));
    t.prompt = *p;
  }
  if (const auto a = get_bool(body, "add_special_tokens")) t.add_special_tokens = *a;
  if (const auto r = get_bool(body, "return_token_strs")) t.return_token_strs = *r;
  return t;
}

DetokenizeRequest parse_detokenize_request(const Json& body, int64_t max_tokens) {
  DetokenizeRequest d;
  if (const auto m = get_string(body, "model")) d.model = *m;
  const Json* tokens = field(body, "tokens");
  if (!tokens) bad("tokens", "tokens is required");
  if (!tokens->is_array()) bad("tokens", "tokens must be a list of token ids, not " + type_name(*tokens));
  // A completion's bound: no more ids than the context holds (so the text
  // answered is bounded by the context × the longest token, too).
  if (int64_t(tokens->size()) > max_tokens)
    throw ApiError(400,
                   "tokens holds " + std::to_string(tokens->size()) + " ids; /detokenize takes up to the model's "
                   "context of " + std::to_string(max_tokens) + " (--max-model-len)",
                   "tokens", "context_length_exceeded");
  for (const Json& v : *tokens) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad("tokens", "tokens must be token ids >= 0, found " + brief(v));
    d.tokens.push_back(int32_t(v.get<int64_t>()));
  }
  return d;
}

}  // namespace fp8lm::server
