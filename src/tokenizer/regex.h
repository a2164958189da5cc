// Unicode regular expressions through PCRE2 (UTF + UCP, JIT-compiled where the
// platform allows): the Split pre-tokenizer patterns of tokenizer.json are
// Oniguruma patterns, and PCRE2 reads the constructs they use (\p{L}, \s,
// lookahead, (?i:...)) with the same meaning.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8lm::tokenizer {

class Regex {
 public:
  // Throws fp8lm::Error naming `origin` and PCRE2's message when the pattern is invalid.
  Regex(const std::string& pattern, const std::string& origin);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(start, end) for each non-overlapping match, left to right.
  // `text` must be valid UTF-8 (checked once by the caller, not per call).
  // An empty match advances by one character, as Oniguruma's find_iter does.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const {
    std::size_t pos = 0;
    while (pos <= text.size()) {
      std::size_t start = 0, end = 0;
      if (!find(text, pos, start, end)) break;
      on_match(start, end);
      if (end == start) {
        if (end >= text.size()) break;
        pos = end + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      } else {
        pos = end;
      }
    }
  }

  // The first match at or after `from`; false when there is none.
  bool find(std::string_view text, std::size_t from, std::size_t& start, std::size_t& end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string origin_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so users need no PCRE2 headers
};

// A regex-quoted literal: for Split/Replace patterns given as {"String": ...}.
std::string regex_escape(std::string_view literal);

}  // namespace fp8lm::tokenizer
