// Template source -> tokens, with Jinja2's whitespace rules as transformers
// configures them (trim_blocks=True, lstrip_blocks=True, no trailing newline).
#pragma once

#include <string>
#include <vector>

namespace fp8lm::chat {

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string text;  // Text: the literal output; String: the unescaped value; Op: the operator
  int line;
};

// Throws fp8lm::Error "chat template line N: ..." on unclosed tags, bad
// characters or unterminated strings.
std::vector<Token> tokenize(const std::string& source);

}  // namespace fp8lm::chat
