// Structured-output flags shared by `generate` and `bench throughput`: --json-schema FILE,
// --json-object, --regex R, --choice C (repeated), --grammar FILE (one of them) and
// --disable-any-whitespace; the constraint they give, compiled against a loaded model.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/runtime.h"
#include "structured/grammar_compiler.h"

namespace fp8lm::cli {

struct GrammarFlags {
  std::string json_schema_file, regex, grammar_file;
  std::vector<std::string> choices;
  bool json_object = false;
  bool disable_any_whitespace = false;  // vLLM's: JSON without free whitespace (", " and ": " only)
};

void add_grammar_flags(CLI::App* cmd, GrammarFlags& f);

// The flags' constraint, its files read (before the model loads, so that a bad path fails at once).
// `speculative`: a --speculative-config is given, which a constraint refuses (fp8lm::Error).
std::optional<structured::GrammarSpec> grammar_spec(const GrammarFlags& f, bool speculative);

// `spec` compiled against the model in `model_dir` (its tokenizer.json, vocabulary and EOS ids);
// `seconds`, when given, receives the compile time.
std::shared_ptr<const structured::CompiledGrammar> compile_grammar(const structured::GrammarSpec& spec,
                                                                   const engine::Runtime& rt,
                                                                   const std::string& model_dir,
                                                                   double* seconds = nullptr);

}  // namespace fp8lm::cli
