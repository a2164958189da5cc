// UTF-8 helpers the tokenizer needs: walking code points, validity, and the
// lossy conversion Hugging Face applies when decoded bytes are not UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8lm::tokenizer::utf8 {

// Length in bytes of the (valid) UTF-8 sequence starting with `lead`; 1 for a
// stray byte, so that walking never stalls on bad input.
inline std::size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
char32_t next(std::string_view s, std::size_t& i);

// The code point before position i (s valid UTF-8, i > 0), moving i back.
char32_t prev(std::string_view s, std::size_t& i);

void append(std::string& out, char32_t cp);

// Length of the longest valid UTF-8 prefix of s.
std::size_t valid_prefix_length(std::string_view s);

inline bool is_valid(std::string_view s) { return valid_prefix_length(s) == s.size(); }

// Rust's String::from_utf8_lossy: every maximal invalid subpart becomes one
// U+FFFD (the Unicode "substitution of maximal subparts" practice).
std::string lossy(std::string_view bytes);

// Unicode White_Space, as Rust's char::is_whitespace.
bool is_whitespace(char32_t c);

// Rust's char::is_alphanumeric (letters and numbers, any script).
bool is_alphanumeric(char32_t c);

// Rust's char::is_numeric (Unicode Nd, Nl, No).
bool is_numeric(char32_t c);

// Unicode punctuation (P*) or ASCII punctuation, as Hugging Face's is_punc.
bool is_punctuation(char32_t c);

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace fp8lm::tokenizer::utf8
