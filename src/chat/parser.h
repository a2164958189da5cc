// Tokens -> syntax tree. Unknown tags, filters and tests are rejected here,
// at parse time as Jinja2 does, with the construct and the line.
#pragma once

#include <string>

#include "chat/ast.h"

namespace fp8lm::chat {

// Throws fp8lm::Error "chat template line N: ..." for any syntax error.
Body parse_template(const std::string& source);

}  // namespace fp8lm::chat
