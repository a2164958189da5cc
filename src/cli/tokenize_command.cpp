// `fp8lm tokenize --model M`: the tokenizer and chat template as the engine
// uses them, for people debugging prompts.
//
//   text -> ids        echo "Hello" | fp8lm tokenize --model M [--json] [--no-special]
//   ids -> text        fp8lm tokenize --model M --decode --text "9707 11"
//   chat -> prompt     fp8lm tokenize --model M --chat conv.json [--add-generation-prompt]
//                                     [--tools tools.json] [--enable-thinking]
//
// M may hold only the tokenizer files (tokenizer.json, tokenizer_config.json).
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "common/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string text;
  bool text_given = false;
  bool json = false;
  bool no_special = false;
  bool decode = false;
  std::string chat_file;
  std::string tools_file;
  bool add_generation_prompt = false;
  bool enable_thinking = false;
};

std::string read_stdin() {
  return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
}

// "9707 11, 1917" or "[9707, 11]" -> ids; anything else is named.
std::vector<uint32_t> parse_ids(const std::string& text, const tokenizer::Tokenizer& tok) {
  std::vector<uint32_t> ids;
  const size_t vocab = tok.vocab_size(true);
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    const size_t len = size_t(end - (text.data() + i));
    if (ec != std::errc() || len == 0)
      throw Error("--decode: '" + text.substr(i, 20) + "' is not a token id (expected non-negative integers)");
    if (v >= vocab)
      throw Error("--decode: token id " + std::to_string(v) + " is outside the vocabulary (size " +
                  std::to_string(vocab) + ")");
    ids.push_back(uint32_t(v));
    i += len;
  }
  return ids;
}

nlohmann::json tokens_of(const std::vector<uint32_t>& ids, const tokenizer::Tokenizer& tok) {
  nlohmann::json tokens = nlohmann::json::array();
  for (uint32_t id : ids) tokens.push_back(tok.id_to_token(id).value_or(""));
  return tokens;
}

void print_ids(const std::vector<uint32_t>& ids) {
  std::string line;
  for (uint32_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
  std::printf("%s\n", line.c_str());
}

nlohmann::ordered_json read_ordered_json(const std::string& path) {
  // key order shows in rendered prompts (tojson), so it is kept as written
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return io::parse_ordered_json(text, path);
}

void run_chat(const TokenizeFlags& f, const tokenizer::Tokenizer& tok) {
  const chat::ModelChatTemplate tmpl = chat::ModelChatTemplate::load(f.model);
  chat::ChatInputs in;
  nlohmann::ordered_json conv = read_ordered_json(f.chat_file);
  if (conv.is_object() && conv.contains("messages")) {
    if (conv.contains("tools")) in.tools = conv["tools"];
    conv = conv["messages"];
  }
  if (!conv.is_array())
    throw Error(f.chat_file + ": expected a list of messages or an object with \"messages\"");
  in.messages = conv;
  if (!f.tools_file.empty()) in.tools = read_ordered_json(f.tools_file);
  in.add_generation_prompt = f.add_generation_prompt;
  if (f.enable_thinking) in.kwargs["enable_thinking"] = true;
  const std::string prompt = tmpl.render(in);
  // transformers tokenizes a rendered chat without adding special tokens:
  // the template already wrote them.
  const std::vector<uint32_t> ids = tok.encode(prompt, false);
  if (f.json) {
    std::printf("%s\n", nlohmann::json{{"prompt", prompt}, {"ids", ids}, {"tokens", tokens_of(ids, tok)}}.dump(2).c_str());
  } else {
    std::printf("%s", prompt.c_str());
    if (prompt.empty() || prompt.back() != '\n') std::printf("\n");
    std::fprintf(stderr, "%zu tokens\n", ids.size());
  }
}

void run(const TokenizeFlags& f) {
  // A directory for --load-format dummy (config.json, no tokenizer): say so rather than "cannot open".
  const std::filesystem::path dir(f.model);
  if (std::filesystem::is_directory(dir) && std::filesystem::exists(dir / "config.json") &&
      !std::filesystem::exists(dir / "tokenizer.json"))
    throw Error(f.model + " has no tokenizer.json (--load-format dummy loads config.json alone); "
                "use bench latency/throughput");
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(f.model);
  if (!f.chat_file.empty()) return run_chat(f, tok);
  const std::string input = f.text_given ? f.text : read_stdin();
  if (f.decode) {
    const std::vector<uint32_t> ids = parse_ids(input, tok);
    const std::string text = tok.decode(ids, f.no_special);
    if (f.json) {
      std::printf("%s\n", nlohmann::json{{"text", text}}.dump(2).c_str());
    } else {
      std::printf("%s\n", text.c_str());
    }
    return;
  }
  const std::vector<uint32_t> ids = tok.encode(input, !f.no_special);
  if (f.json) {
    std::printf("%s\n", nlohmann::json{{"ids", ids}, {"tokens", tokens_of(ids, tok)}}.dump(2).c_str());
  } else {
    print_ids(ids);
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Text -> token ids, ids -> text, or a chat -> its prompt and ids");
  auto f = std::make_shared<TokenizeFlags>();
  cmd->add_option("--model,model", f->model, "Model directory (only the tokenizer files are needed)")->required();
  cmd->add_option("--text", f->text, "Input text (default: standard input); with --decode, the ids")
      ->each([f](const std::string&) { f->text_given = true; });
  cmd->add_flag("--json", f->json, "Print JSON: {\"ids\": [...], \"tokens\": [...]}");
  cmd->add_flag("--no-special", f->no_special,
                "Do not add the post-processor's special tokens (with --decode: skip special tokens)");
  cmd->add_flag("--decode", f->decode, "Decode ids (space- or comma-separated, or a JSON list) to text");
  auto* chat = cmd->add_option("--chat", f->chat_file, "Render a conversation (OpenAI messages JSON) with the chat template");
  cmd->add_option("--tools", f->tools_file, "With --chat: tool definitions (JSON list of function schemas)")->needs(chat);
  cmd->add_flag("--add-generation-prompt", f->add_generation_prompt, "With --chat: end with the assistant prompt")
      ->needs(chat);
  cmd->add_flag("--enable-thinking", f->enable_thinking, "With --chat: pass enable_thinking=true to the template")
      ->needs(chat);
  cmd->callback([f] { run(*f); });
}

}  // namespace fp8lm::cli
