#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "common/error.h"

namespace fp8lm::tokenizer {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Match data and a JIT stack per thread: allocating them per call would cost
// more than the match itself on the short pieces tokenizers feed in. The JIT
// stack is larger than the default 32 KiB because patterns like \s+(?!\S)
// backtrack over whole whitespace runs.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() {
    if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  ThreadMatchState(const ThreadMatchState&) = delete;
  ThreadMatchState& operator=(const ThreadMatchState&) = delete;
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& origin) : pattern_(pattern), origin_(origin) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr)
    throw Error(origin + ": invalid regex '" + pattern + "' at offset " + std::to_string(offset) + ": " +
                pcre2_message(error));
  // JIT is an optimisation: where it is unavailable the interpreter runs.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view text, std::size_t from, std::size_t& start, std::size_t& end) const {
  auto& state = thread_state();
  const int rc = pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                             text.size(), from, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0 && rc != 0)
    throw Error(origin_ + ": regex '" + pattern_ + "' failed on the input: " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
  start = ov[0];
  end = ov[1];
  return true;
}

std::string regex_escape(std::string_view literal) {
  // \Q...\E quotes everything except a literal "\E", which is spliced in.
  std::string out = "\\Q";
  for (std::size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'E') {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out.push_back(literal[i]);
    }
  }
  out += "\\E";
  return out;
}

}  // namespace fp8lm::tokenizer
