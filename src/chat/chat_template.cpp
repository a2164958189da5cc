#include "chat/chat_template.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "chat/builtins.h"
#include "chat/parser.h"
#include "common/error.h"
#include "io/json_file.h"

namespace fp8lm::chat {

struct Body_ {
  Body body;
};

namespace {

// transformers' render inputs: message keys whose value is None are dropped,
// and a message's reasoning is made visible under both "thinking" and
// "reasoning_content" (from whichever of the three names the caller used).
Value prepare_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw Error("chat messages must be a JSON array");
  if (messages.empty()) throw Error("Cannot apply chat template to an empty conversation. Provide at least one message.");
  List out;
  for (const auto& m : messages) {
    if (!m.is_object()) throw Error("Chat messages should be dicts, but got " + m.dump());
    Value msg = Value::make_dict();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) msg.dict->emplace_back(k, Value::from_json(v));
    const Value* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (!reasoning) reasoning = msg.find(key);
    if (reasoning) {
      // {"thinking": r, **msg, "reasoning_content": r}, built in one pass: a
      // message's keys are unique (a JSON object), and setting them one by one
      // (a search each) took time quadratic in a request's key count.
      const Value r = *reasoning;
      Dict aliased{{"thinking", r}};
      std::size_t reasoning_at = 0;  // 0: not among the keys yet
      for (const auto& [k, v] : *msg.dict) {
        if (k == "thinking") { aliased[0].second = v; continue; }
        if (k == "reasoning_content") reasoning_at = aliased.size();
        aliased.emplace_back(k, v);
      }
      if (reasoning_at) aliased[reasoning_at].second = r;
      else aliased.emplace_back("reasoning_content", r);
      msg = Value::make_dict(std::move(aliased));
    }
    out.push_back(msg);
  }
  return Value::make_list(std::move(out));
}

std::string format_time(const std::string& fmt, const RenderEnv& env) {
  std::tm tm{};
  if (env.now) {
    tm = env.now();
  } else {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    localtime_r(&t, &tm);
  }
  if (fmt.empty()) return "";
  reserve_value(saturating_mul(fmt.size(), 8) + 64, "strftime_now");  // the buffer, zero-filled
  std::string buf(fmt.size() * 8 + 64, '\0');
  const std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return buf;
}

std::vector<std::pair<std::string, Value>> globals(const RenderEnv& env) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("raise_exception", Value::function([](CallArgs& a) -> Value {
                   throw TemplateRaised(a.positional.empty() ? std::string() : to_str(a.positional[0]), 0);
                 }));
  g.emplace_back("strftime_now", Value::function([&env](CallArgs& a) {
                   if (a.positional.empty() || !a.positional[0].is_string()) throw Error("strftime_now needs a format string");
                   return Value::string(format_time(a.positional[0].str(), env));
                 }));
  auto make_mapping = [](CallArgs& a, bool ns) {
    Value d = ns ? Value::make_namespace() : Value::make_dict();
    // Each key is copied into the new mapping, after a search for it (set).
    for (const Value& p : a.positional) {
      if (!p.is_mapping()) throw Error(ns ? "namespace() takes mappings and keyword arguments" : "dict() takes mappings and keyword arguments");
      for (const auto& [k, v] : *p.dict) {
        count_work(k.size());
        d.set(k, v);
      }
    }
    for (const auto& [k, v] : a.keyword) {
      if (ns && k.starts_with("_")) throw Error("cannot store underscore-prefixed attribute '" + k + "' on a namespace");
      count_work(k.size());
      d.set(k, v);
    }
    return d;
  };
  g.emplace_back("namespace", Value::function([make_mapping](CallArgs& a) { return make_mapping(a, true); }));
  g.emplace_back("dict", Value::function([make_mapping](CallArgs& a) { return make_mapping(a, false); }));
  g.emplace_back("range", Value::function([](CallArgs& a) {
                   std::int64_t v[3] = {0, 0, 1};
                   if (a.positional.empty() || a.positional.size() > 3) throw Error("range expects 1 to 3 integer arguments");
                   for (const Value& p : a.positional)
                     if (p.kind != Value::Kind::Int) throw Error("range: arguments must be integers");
                   if (a.positional.size() == 1) v[1] = a.positional[0].i;
                   else for (std::size_t k = 0; k < a.positional.size(); ++k) v[k] = a.positional[k].i;
                   if (v[2] == 0) throw Error("range() arg 3 must not be zero");
                   // The length first (unsigned: the span of two int64 always fits),
                   // so that the limit is checked before the list is allocated.
                   const auto start = static_cast<std::uint64_t>(v[0]), stop = static_cast<std::uint64_t>(v[1]);
                   const std::uint64_t stride = v[2] > 0 ? static_cast<std::uint64_t>(v[2]) : 0 - static_cast<std::uint64_t>(v[2]);
                   std::uint64_t n = 0;
                   if (v[2] > 0 && v[0] < v[1]) n = (stop - start - 1) / stride + 1;
                   if (v[2] < 0 && v[0] > v[1]) n = (start - stop - 1) / stride + 1;
                   reserve_value(saturating_mul(n, sizeof(Value)), "range too large (" + std::to_string(n) + " items)", n);
                   List out;
                   out.reserve(n);
                   // start + k * step, in unsigned arithmetic (it wraps as two's complement).
                   for (std::uint64_t k = 0; k < n; ++k)
                     out.push_back(Value::integer(static_cast<std::int64_t>(start + k * static_cast<std::uint64_t>(v[2]))));
                   return Value::make_list(std::move(out));
                 }));
  return g;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot read file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string token_text(const nlohmann::json& cfg, const char* key, const std::string& origin) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw Error(origin + ": field '" + key + "' must be a string or an AddedToken object with \"content\"");
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string origin)
    : source_(std::move(source)), origin_(std::move(origin)), body_(std::make_unique<Body_>()) {
  try {
    body_->body = parse_template(source_);
  } catch (const Error& e) {
    if (origin_.empty()) throw;
    throw Error(origin_ + ": " + e.what());
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const ChatInputs& in, const std::string& bos_token, const std::string& eos_token,
                                 const RenderEnv& env) const {
  std::vector<std::pair<std::string, Value>> vars = globals(env);
  vars.emplace_back("messages", prepare_messages(in.messages));
  if (!in.tools.is_null() && !in.tools.is_array()) throw Error("chat tools must be a JSON array or null");
  vars.emplace_back("tools", Value::from_json(in.tools));
  vars.emplace_back("documents", Value::none());
  vars.emplace_back("add_generation_prompt", Value::boolean(in.add_generation_prompt));
  if (!bos_token.empty()) vars.emplace_back("bos_token", Value::string(bos_token));
  if (!eos_token.empty()) vars.emplace_back("eos_token", Value::string(eos_token));
  if (!in.kwargs.is_null()) {
    if (!in.kwargs.is_object()) throw Error("chat template kwargs must be a JSON object");
    for (const auto& [k, v] : in.kwargs.items()) vars.emplace_back(k, Value::from_json(v));
  }
  Evaluator ev(env, vars);
  return ev.render(body_->body);
}

ModelChatTemplate::ModelChatTemplate(std::map<std::string, std::string> templates, std::string bos_token,
                                     std::string eos_token)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  for (auto& [name, src] : templates)
    templates_[name] = std::make_shared<ChatTemplate>(std::move(src), "chat template '" + name + "'");
}

ModelChatTemplate ModelChatTemplate::load(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::exists(config_path)) config = io::read_json_file(config_path);
  const std::string origin = config_path.string();
  if (!config.is_object()) throw Error(origin + ": must be a JSON object");

  std::map<std::string, std::string> templates;
  if (std::filesystem::exists(dir / "chat_template.jinja")) {
    templates["default"] = read_text(dir / "chat_template.jinja");
  } else if (std::filesystem::exists(dir / "chat_template.json")) {
    const auto j = io::read_json_file(dir / "chat_template.json");
    if (!j.is_object() || !j.contains("chat_template") || !j["chat_template"].is_string())
      throw Error((dir / "chat_template.json").string() + ": field 'chat_template' must be a string");
    templates["default"] = j["chat_template"].get<std::string>();
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    const auto& t = config["chat_template"];
    if (t.is_string()) {
      templates["default"] = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& e : t) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") || !e["template"].is_string())
          throw Error(origin + ": each entry of 'chat_template' must be {\"name\": str, \"template\": str}");
        templates[e["name"].get<std::string>()] = e["template"].get<std::string>();
      }
    } else {
      throw Error(origin + ": field 'chat_template' must be a string or a list of {name, template}");
    }
  }
  if (templates.empty()) throw Error(dir.string() + ": the model has no chat template");
  return ModelChatTemplate(std::move(templates), token_text(config, "bos_token", origin), token_text(config, "eos_token", origin));
}

const ChatTemplate& ModelChatTemplate::select(bool with_tools) const {
  if (with_tools) {
    const auto it = templates_.find("tool_use");
    if (it != templates_.end()) return *it->second;
  }
  const auto it = templates_.find("default");
  if (it == templates_.end()) {
    std::string names;
    for (const auto& [n, t] : templates_) names += (names.empty() ? "" : ", ") + n;
    throw Error("This model has multiple chat templates with no default specified (available: " + names + ")");
  }
  return *it->second;
}

std::string ModelChatTemplate::render(const ChatInputs& inputs, const RenderEnv& env) const {
  return select(!inputs.tools.is_null()).render(inputs, bos_, eos_, env);
}

std::vector<std::string> ModelChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto& [n, t] : templates_) out.push_back(n);
  return out;
}

}  // namespace fp8lm::chat
