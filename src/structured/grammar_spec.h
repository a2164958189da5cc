// What a request constrains its output to (structured outputs, issue 43): the forms OpenAI's
// response_format and vLLM's structured_outputs take, as data. Compiling one against a model's
// vocabulary is grammar_compiler.h's; this header needs no grammar library, so that what only
// parses requests (the server's API layer and its fuzzer) does not link one.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"

namespace fp8lm::structured {

struct GrammarSpec {
  enum class Kind {
    kJsonObject,     // any JSON object (response_format {"type": "json_object"})
    kJsonSchema,     // `text` is a JSON schema (response_format json_schema, structured_outputs.json)
    kRegex,          // `text` is a regular expression the whole output matches
    kChoice,         // the output is exactly one of `choices`
    kGrammar,        // `text` is an EBNF grammar (xgrammar's / GBNF syntax, root rule `root`)
    kStructuralTag,  // `text` is a structural tag (xgrammar's JSON format)
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  // JSON forms: any whitespace between tokens (vLLM's default), or the compact form
  // (vLLM's disable_any_whitespace): ", " and ": " separators, no other whitespace.
  bool any_whitespace = true;

  bool operator==(const GrammarSpec&) const = default;
};

inline const char* kind_name(GrammarSpec::Kind k) {
  switch (k) {
    case GrammarSpec::Kind::kJsonObject: return "json_object";
    case GrammarSpec::Kind::kJsonSchema: return "json_schema";
    case GrammarSpec::Kind::kRegex: return "regex";
    case GrammarSpec::Kind::kChoice: return "choice";
    case GrammarSpec::Kind::kGrammar: return "grammar";
    case GrammarSpec::Kind::kStructuralTag: return "structural_tag";
  }
  return "?";
}

// The EBNF grammar (xgrammar's syntax) whose language is exactly `choices`: root ::= "a" | "b" | …
// Throws fp8lm::Error for an empty list.
inline std::string choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) throw Error("choice: the list of choices is empty");
  std::string g = "root ::= ";
  char buf[8];
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) g += " | ";
    g += '"';
    for (const char c : choices[i]) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        g += '\\';
        g += c;
      } else if (u < 0x20 || u == 0x7f) {
        std::snprintf(buf, sizeof buf, "\\u%04x", u);  // fixed width: \x would take the next hex digits too
        g += buf;
      } else {
        g += c;  // UTF-8 bytes as they are: the literal is UTF-8
      }
    }
    g += '"';
  }
  return g;
}

}  // namespace fp8lm::structured
