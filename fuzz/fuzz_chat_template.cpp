// libFuzzer: arbitrary bytes as a chat template, parsed and rendered over a
// fixed conversation with tools. Any fp8lm::Error is a correct answer; a
// crash, a sanitizer report or a hang is a bug. Tight limits keep every
// input fast (loops, output size, macro recursion).
//
// Inputs whose first byte is below 24 (a control character, which no
// template starts with) build a deep template instead: that byte picks one of
// 24 nesting forms, bytes 2-3 how many times it repeats (up to 50,000),
// shifted right by byte 1 (so that most inputs stay small and quick), and the
// rest is appended inside the innermost level. Deep nesting needs long
// repetitive inputs that mutation alone would take long to grow (issue 39:
// 20,000-term chains crashed the renderer), so the input chooses it
// compactly, and libFuzzer explores the forms, the depths around the bounds
// and what follows them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

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

// One way to nest: head + repeat × n + body + close × n + tail, where body's
// '@' stands for the rest of the input and '#' for n. Left-associative
// chains repeat an operator with its operand; prefix operators and brackets
// open n levels (and close them); blocks nest statements; the last two nest
// macro calls and a value built at run time.
struct Form {
  const char* head;
  const char* repeat;
  const char* body;
  const char* close;
  const char* tail;
};
constexpr Form kForms[] = {
    {"{{ 1", " + 1", "@", "", " }}"},
    {"{{ 'a'", "|lower", "@", "", " }}"},
    {"{{ 'a'", " ~ 'b'", "@", "", " }}"},
    {"{{ 1", " and 1", "@", "", " }}"},
    {"{{ 0", " or 0", "@", "", " }}"},
    {"{{ 1", " == 1", "@", "", " }}"},
    {"{{ 'a'", " in 'ab'", "@", "", " }}"},
    {"{{ 2", " ** 1", "@", "", " }}"},
    {"{{ 1", " is defined", "@", "", " }}"},
    {"{{ 1", " if 1 else 0", "@", "", " }}"},
    {"{{ messages", ".x", "@", "", " }}"},
    {"{{ messages", "[0]", "@", "", " }}"},
    {"{{ 'abc'", "[1:]", "@", "", " }}"},
    {"{{ range", "(1)", "@", "", " }}"},
    {"{{ ", "(", "1@", ")", " }}"},
    {"{{ ", "[", "1@", "]", " }}"},
    {"{{ ", "{'k': ", "1@", "}", " }}"},
    {"{{ ", "not ", "1@", "", " }}"},
    {"{{ ", "-", "1@", "", " }}"},
    {"{{ ", "range(", "1@", ")", " }}"},
    {"", "{% if 1 %}", "{{ 1@ }}", "{% endif %}", ""},
    {"", "{% for x in [1] %}", "{{ x@ }}", "{% endfor %}", ""},
    {"{% macro f(n) %}{{ f(n - 1) if n > 0 }}{% endmacro %}", "", "{{ f(#)@ }}", "", ""},
    {"{% set ns = namespace(x=[]) %}", "", "{% for i in range(#) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x@ }}", "", ""},
};

// head + repeat × n + body + close × n + tail for form f.
std::string expand(const Form& f, std::string_view data) {
  const auto byte = [&](std::size_t k) { return static_cast<std::size_t>(static_cast<unsigned char>(data[k])); };
  const std::size_t n = ((byte(2) | byte(3) << 8) % 50001) >> (byte(1) % 16);
  std::string s = f.head;
  for (std::size_t k = 0; k < n; ++k) s += f.repeat;
  for (const char* c = f.body; *c; ++c) {
    if (*c == '@') s += data.substr(4);
    else if (*c == '#') s += std::to_string(n);
    else s += *c;
  }
  for (std::size_t k = 0; k < n; ++k) s += f.close;
  return s + f.tail;
}

// One function per form, called through a table: coverage then tells the
// forms apart (a plain table lookup would look the same for all of them),
// so libFuzzer keeps an input for each and mutates them separately.
template <std::size_t F>
[[gnu::noinline]] std::string expand_form(std::string_view data) {
  return expand(kForms[F], data);
}
template <std::size_t... F>
constexpr auto form_builders(std::index_sequence<F...>) {
  return std::array{&expand_form<F>...};
}
constexpr auto kBuilders = form_builders(std::make_index_sequence<std::size(kForms)>{});

std::string deep_template(std::string_view data) {
  return kBuilders[static_cast<unsigned char>(data[0])](data);
}

void render(const std::string& source) {
  fp8lm::chat::RenderEnv env;
  env.limits.max_steps = 20000;
  env.limits.max_output_bytes = 1 << 16;
  env.limits.max_call_depth = 16;
  env.now = [] { return std::tm{}; };
  try {
    const fp8lm::chat::ChatTemplate t(source);
    (void)t.render(inputs(), "<s>", "</s>", env);
  } catch (const fp8lm::Error&) {
  }
}

}  // namespace

// Every form once at the bound and well past it, before fuzzing starts: a
// short run may not reach all of them by mutation.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (std::uint8_t form = 0; form < kBuilders.size(); ++form)
    for (const unsigned n : {200u, 201u, 20000u}) {
      const char input[] = {static_cast<char>(form), 0, static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
      render(deep_template(std::string_view(input, sizeof input)));
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 16384) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  render(size >= 4 && data[0] < kBuilders.size() ? deep_template(input) : std::string(input));
  return 0;
}
