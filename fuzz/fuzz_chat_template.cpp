// libFuzzer: arbitrary bytes as a chat template, parsed and rendered over a
// fixed conversation with tools. Any fp8lm::Error is a correct answer; a
// crash, a sanitizer report or a hang is a bug. Tight limits keep every
// input fast (loops, output size, macro recursion).
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "common/error.h"

namespace {

const fp8lm::chat::ChatInputs& inputs() {
  static const fp8lm::chat::ChatInputs in = [] {
    fp8lm::chat::ChatInputs i;
    i.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "héllo 🙂"}]},
      {"role": "assistant", "content": "<think>r</think>a", "tool_calls": [{"type": "function",
        "function": {"name": "f", "arguments": {"x": 1.5, "y": [null, true]}}}]},
      {"role": "tool", "tool_call_id": "1", "content": "42"}])");
    i.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}}}])");
    i.add_generation_prompt = true;
    i.kwargs = {{"enable_thinking", false}};
    return i;
  }();
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 16384) return 0;
  fp8lm::chat::RenderEnv env;
  env.limits.max_steps = 20000;
  env.limits.max_output_bytes = 1 << 16;
  env.limits.max_call_depth = 16;
  env.now = [] { return std::tm{}; };
  try {
    const fp8lm::chat::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size));
    (void)t.render(inputs(), "<s>", "</s>", env);
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
