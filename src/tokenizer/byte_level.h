// GPT-2's byte <-> character table: byte-level BPE spells every byte as one
// printable code point so that vocabularies hold only visible characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8lm::tokenizer::byte_level {

// The UTF-8 spelling of the character that stands for `byte`.
std::string_view char_for_byte(unsigned char byte);

// The byte a character stands for, or -1 when it stands for none.
int byte_for_char(char32_t c);

// Appends the byte-level spelling of `bytes`.
void encode(std::string_view bytes, std::string& out);

// GPT-2's pattern, used by ByteLevel when use_regex is true.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace fp8lm::tokenizer::byte_level
