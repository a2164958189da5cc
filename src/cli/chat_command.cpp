// `fp8lm chat --model M`: an interactive conversation through the model's chat
// template. Each line on stdin is a user message; the reply streams to stdout.
// `/reset` starts over, `/exit` (or end of input) quits. The whole conversation
// is rendered and run again each turn (the engine's prefix cache serves `fp8lm serve`;
// chat drives generate() alone, one sequence, without it).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/generate.h"

namespace fp8lm::cli {
namespace {

struct ChatFlags {
  std::string system;
  std::string speculative_config;  // --speculative-config; empty: none
};

void run(const ModelFlags& mf, const RunFlags& rf, const SamplingFlags& sf, const ChatFlags& cf) {
  std::string note;
  engine::SamplingParams params = sf.params(mf.model, &note);
  const std::optional<engine::SpeculativeConfig> spec = speculative_config(cf.speculative_config);
  engine::RuntimeOptions options = rf.options();
  options.max_num_seqs = 1;  // one conversation: the KV cache and the step profile are for it alone
  auto [draft, rt] = load_target_and_draft(mf.model, mf.overrides(), options, spec);
  (void)rt->tokenizer();  // a model without tokenizer.json (--load-format dummy) stops here, saying so
  const chat::ModelChatTemplate tmpl = chat::ModelChatTemplate::load(mf.model);
  print_load_summary(*rt, rf);
  add_model_eos(params, *rt, mf.model);
  std::fprintf(stderr, "fp8lm: %s\n", note.c_str());
  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) std::fprintf(stderr, "fp8lm: chat — /reset starts over, /exit quits\n");

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!cf.system.empty()) messages.push_back({{"role", "system"}, {"content", cf.system}});
  const size_t fresh = messages.size();
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + std::ptrdiff_t(fresh), messages.end());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    chat::ChatInputs in;
    in.messages = messages;
    in.add_generation_prompt = true;
    const std::string prompt = tmpl.render(in);
    // The template already wrote every special token the model expects.
    const std::vector<uint32_t> ids = rt->tokenizer().encode(prompt, /*add_special_tokens=*/false);
    const std::vector<int32_t> prompt_ids(ids.begin(), ids.end());
    try {
      const engine::GenerationResult r = engine::generate(
          *rt, prompt_ids, params,
          [](std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
          },
          spec ? &*spec : nullptr, draft.get());
      std::printf("\n");
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", r.text}});
    } catch (const Error& e) {
      // A conversation that outgrew the context: say so and let the user go on.
      std::fprintf(stderr, "fp8lm: error: %s (type /reset to start over)\n", e.what());
      messages.erase(messages.end() - 1);
    }
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model through its chat template (one message per line)");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto sf = add_sampling_flags(cmd);
  auto cf = std::make_shared<ChatFlags>();
  cmd->add_option("--system", cf->system, "A system message to start the conversation with");
  add_speculative_config_flag(cmd, cf->speculative_config);
  cmd->callback([mf, rf, sf, cf] { run(*mf, *rf, *sf, *cf); });
}

}  // namespace fp8lm::cli
