#include "cli/grammar_flags.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace fp8lm::cli {
namespace {

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string(flag) + ": cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void add_grammar_flags(CLI::App* cmd, GrammarFlags& f) {
  auto* schema = cmd->add_option("--json-schema", f.json_schema_file,
                                 "Constrain the output to JSON valid under the JSON schema in FILE (structured outputs)");
  auto* object = cmd->add_flag("--json-object", f.json_object, "Constrain the output to a JSON object");
  auto* regex = cmd->add_option("--regex", f.regex, "Constrain the output to a match of the regular expression R");
  auto* choice = cmd->add_option("--choice", f.choices, "Constrain the output to one of these texts (repeat the flag)");
  auto* grammar = cmd->add_option("--grammar", f.grammar_file,
                                  "Constrain the output to the EBNF grammar in FILE (xgrammar's syntax, root rule `root`)");
  cmd->add_flag("--disable-any-whitespace", f.disable_any_whitespace,
                "JSON constraints without free whitespace: \", \" and \": \" separators only (vLLM's option; a small "
                "model given any whitespace may spend its tokens on it)");
  const std::vector<CLI::Option*> constraints = {schema, object, regex, choice, grammar};
  for (CLI::Option* a : constraints)
    for (CLI::Option* b : constraints)
      if (a != b) a->excludes(b);
}

std::optional<structured::GrammarSpec> grammar_spec(const GrammarFlags& f, bool speculative) {
  using Kind = structured::GrammarSpec::Kind;
  structured::GrammarSpec s;
  if (!f.json_schema_file.empty()) s = {Kind::kJsonSchema, read_text_file(f.json_schema_file, "--json-schema"), {}, true};
  else if (f.json_object) s = {Kind::kJsonObject, "", {}, true};
  else if (!f.regex.empty()) s = {Kind::kRegex, f.regex, {}, true};
  else if (!f.choices.empty()) s = {Kind::kChoice, "", f.choices, true};
  else if (!f.grammar_file.empty()) s = {Kind::kGrammar, read_text_file(f.grammar_file, "--grammar"), {}, true};
  else return std::nullopt;
  if (speculative)
    throw Error("structured outputs decode one token a step: --speculative-config is refused with a constraint");
  s.any_whitespace = !f.disable_any_whitespace;
  return s;
}

std::shared_ptr<const structured::CompiledGrammar> compile_grammar(const structured::GrammarSpec& spec,
                                                                   const engine::Runtime& rt,
                                                                   const std::string& model_dir, double* seconds) {
  const structured::GrammarVocabulary vocabulary(rt.tokenizer(), std::filesystem::path(model_dir) / "tokenizer.json",
                                                 rt.config().vocab_size, rt.eos_ids());
  // In this process, unlike the server's worker processes (structured/compile_worker.h): one
  // request, which has nothing else to stall; Ctrl-C and the shell's ulimit bound it.
  structured::GrammarCompiler compiler(vocabulary);
  const auto t0 = std::chrono::steady_clock::now();
  auto g = compiler.compile(spec);
  if (seconds != nullptr) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

}  // namespace fp8lm::cli
