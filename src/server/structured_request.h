// The structured-output fields of a request (issue 43) → what its output is constrained to:
// OpenAI's response_format (text, json_object, json_schema) and vLLM's structured_outputs (json,
// regex, choice, grammar, json_object, structural_tag, disable_any_whitespace), on completions and
// chat completions alike. Pure: the schema or grammar is checked when it is compiled against the
// model's vocabulary (structured::GrammarCompiler, the server's compile pool), not here.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/reasoning.h"
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

// For a reasoning model (--reasoning-parser): `spec` to hold after the reasoning, which is free
// text — an xgrammar structural tag: qwen3, an optional <think> … </think> first; deepseek_r1 (the
// template opened <think>), any text up to </think> first; then at most two whitespace characters
// and the constraint. JSON constraints inside a structural tag take at most one whitespace
// character in a row where `spec` asks for compact JSON (a tag's JSON has no separators option).
// Throws ApiError(400) naming `param` for a structural tag in the older structures/triggers form.
structured::GrammarSpec after_reasoning(const structured::GrammarSpec& spec, ReasoningParser parser,
                                        const std::string& param);

// Whether `prompt` (the rendered chat) already ended the reasoning: its last <think> is closed (a
// template that turned thinking off writes <think></think> itself), so the output is content.
bool reasoning_ended(const std::string& prompt);

}  // namespace fp8lm::server
