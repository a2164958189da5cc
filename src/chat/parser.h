// Tokens -> syntax tree. Unknown tags, filters and tests are rejected here,
// at parse time as Jinja2 does, with the construct and the line.
#pragma once

#include <string>

#include "chat/ast.h"

namespace fp8lm::chat {

// How deeply one expression may nest: every node with operands counts (an
// operator, comparison, filter, test, attribute or item access, call,
// conditional, literal list). Left-associative chains such as `1 + 1 + ...`,
// `x|f|f|...` or `a.b.c...` are parsed in a loop yet nest one level per
// operator, and evaluating or destroying the tree recurses once per level.
inline constexpr int kMaxExpressionDepth = 200;

// Throws fp8lm::Error "chat template line N: ..." for any syntax error, and
// "... expression nests deeper than 200 levels" beyond kMaxExpressionDepth.
Body parse_template(const std::string& source);

}  // namespace fp8lm::chat
