// libFuzzer: arbitrary bytes as the body of /v1/completions and
// /v1/chat/completions, through the calls `fp8lm serve` makes: parse_body,
// parse_completion_request / parse_chat_request, check_expanded_size, and for
// a chat body that parses, its messages rendered by real chat templates (the
// shipped model's, and Qwen3's when the shared Hugging Face files are there).
// An ApiError or fp8lm::Error is a correct answer; a crash, a sanitizer
// report, a hang or a runaway allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "common/error.h"
#include "server/api.h"

namespace {

using fp8lm::chat::ModelChatTemplate;

const std::vector<std::unique_ptr<ModelChatTemplate>>& templates() {
  static const auto all = [] {
    std::vector<std::unique_ptr<ModelChatTemplate>> t;
    const std::filesystem::path root(FP8LM_SOURCE_DIR);
    for (const auto& dir : {root / "models" / "fp8lm-gutenberg-22m", root / ".." / "shared" / "data" / "hf" / "Qwen__Qwen3-4B"})
      if (std::filesystem::exists(dir / "tokenizer_config.json"))
        t.push_back(std::make_unique<ModelChatTemplate>(ModelChatTemplate::load(dir)));
    return t;
  }();
  return all;
}

void render(const fp8lm::server::ApiRequest& r) {
  fp8lm::chat::ChatInputs in;
  in.messages = r.messages;
  in.add_generation_prompt = r.add_generation_prompt;
  in.kwargs = r.chat_template_kwargs;
  fp8lm::chat::RenderEnv env;
  env.limits.max_steps = 100000;
  env.limits.max_output_bytes = 1 << 20;
  env.now = [] { return std::tm{}; };
  for (const auto& t : templates()) {
    try {
      (void)t->render(in, env);
    } catch (const fp8lm::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const fp8lm::server::Json body = fp8lm::server::parse_body(text);
    try {
      const auto r = fp8lm::server::parse_completion_request(body);
      fp8lm::server::check_expanded_size(r, std::vector<std::int64_t>(r.prompts.size(), 16));
      (void)fp8lm::server::dump(body);
    } catch (const fp8lm::server::ApiError&) {
    }
    const auto r = fp8lm::server::parse_chat_request(body);
    fp8lm::server::check_expanded_size(r, {16});
    render(r);
  } catch (const fp8lm::server::ApiError&) {
  }
  return 0;
}
