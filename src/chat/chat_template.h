// Chat templates, rendered in C++ exactly as Hugging Face transformers'
// apply_chat_template(..., tokenize=False) renders them.
//
//   auto t = fp8lm::chat::ModelChatTemplate::load("models/fp8lm-gutenberg-22m");
//   std::string prompt = t.render({.messages = msgs, .add_generation_prompt = true});
//
// JSON inputs are nlohmann::ordered_json because key order is visible in the
// output (tojson of tools and arguments); parse them with ordered_json::parse.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/eval.h"

namespace fp8lm::chat {

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style messages
  nlohmann::ordered_json tools = nullptr;  // list of function schemas, or null for none
  bool add_generation_prompt = false;
  // Everything else the template reads: enable_thinking, date_string, ...;
  // these override bos_token / eos_token when given.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

struct Body_;
// One parsed template. Parsing happens once, in the constructor; render may
// be called any number of times (it does not modify the template).
class ChatTemplate {
 public:
  // `origin` names the template in error messages. Throws fp8lm::Error on a
  // syntax error or an unsupported construct, naming it and its line.
  explicit ChatTemplate(std::string source, std::string origin = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with `bos_token` / `eos_token` defined as given (unset when
  // empty). A template's raise_exception(...) throws TemplateRaised.
  std::string render(const ChatInputs& inputs, const std::string& bos_token = {}, const std::string& eos_token = {},
                     const RenderEnv& env = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string origin_;
  std::unique_ptr<Body_> body_;
};

// The template(s) and special tokens of a model directory.
class ModelChatTemplate {
 public:
  // Reads, in transformers' order of precedence, chat_template.jinja, then
  // chat_template.json ({"chat_template": ...}), then tokenizer_config.json's
  // "chat_template" (a string, or a list of {"name", "template"}); bos_token
  // and eos_token come from tokenizer_config.json (strings or AddedToken
  // objects). Throws fp8lm::Error when the directory has no chat template.
  static ModelChatTemplate load(const std::filesystem::path& model_dir);

  // A template given directly (e.g. a .jinja file outside a model directory).
  ModelChatTemplate(std::map<std::string, std::string> templates, std::string bos_token, std::string eos_token);

  // Picks "tool_use" when tools are given and the model has one, else "default".
  std::string render(const ChatInputs& inputs, const RenderEnv& env = {}) const;
  const ChatTemplate& select(bool with_tools) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::shared_ptr<ChatTemplate>> templates_;
  std::string bos_, eos_;
};

}  // namespace fp8lm::chat
