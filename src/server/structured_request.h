// The structured-output fields of a request (issue 43) → what its output is constrained to:
// OpenAI's response_format (text, json_object, json_schema) and vLLM's structured_outputs (json,
// regex, choice, grammar, json_object, structural_tag, disable_any_whitespace), on completions and
// chat completions alike. Pure: the schema or grammar is checked when it is compiled against the
// model's vocabulary (structured::GrammarCompiler, the server's compile pool), not here.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "structured/grammar_spec.h"

namespace fp8lm::server {

struct StructuredRequest {
  structured::GrammarSpec spec;
  std::string param;  // the request field it came from, named in errors ("response_format", …)
};

// None when the request constrains nothing ({"type": "text"} or no field). Throws ApiError(400)
// naming the field for a wrong shape, two constraints at once, or an option fp8lm does not
// implement.
std::optional<StructuredRequest> parse_structured_outputs(const nlohmann::ordered_json& body);

}  // namespace fp8lm::server
