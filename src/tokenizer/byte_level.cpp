#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer::byte_level {

namespace {

// Printable Latin-1 bytes stand for themselves; the other 68 bytes are
// mapped, in order, to U+0100 onwards.
struct Tables {
  std::array<std::string, 256> spelling;
  std::array<int, 512> byte_of{};  // indexed by code point (all are < 0x144)
  Tables() {
    byte_of.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + extra++);
      utf8::append(spelling[static_cast<std::size_t>(b)], cp);
      byte_of[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view char_for_byte(unsigned char byte) { return tables().spelling[byte]; }

int byte_for_char(char32_t c) { return c < 512 ? tables().byte_of[c] : -1; }

void encode(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  for (const char c : bytes) out.append(t.spelling[static_cast<unsigned char>(c)]);
}

}  // namespace fp8lm::tokenizer::byte_level
