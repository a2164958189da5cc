// `fp8lm generate --model M --prompt TEXT`: one completion, streamed to stdout
// as it is generated; what was loaded and how fast it ran go to stderr, so
// the output pipes cleanly. `--json` prints one JSON object instead (text,
// token ids, finish reason, timings) for scripts and tests. `--speculative-config JSON` drafts
// tokens with the n-gram drafter and verifies them k + 1 at a time (engine/speculative.h).
// `--json-schema FILE`, `--json-object`, `--regex R`, `--choice C` (repeated) or `--grammar FILE`
// constrain the output (structured outputs through xgrammar, src/structured).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <iterator>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/generate.h"
#include "structured/grammar_compiler.h"

namespace fp8lm::cli {
namespace {

struct GenerateFlags {
  std::string prompt;
  CLI::Option* prompt_option = nullptr;
  bool json = false;
  bool no_special = false;
  std::string speculative_config;  // vLLM's --speculative-config JSON; empty: none
  // Structured outputs: at most one of these (CLI11 refuses two).
  std::string json_schema_file, regex, grammar_file;
  std::vector<std::string> choices;
  bool json_object = false;
  bool disable_any_whitespace = false;  // vLLM's: JSON without free whitespace (", " and ": " only)
};

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string(flag) + ": cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The flags' constraint, files read (before the model loads, so that a bad path fails at once).
std::optional<structured::GrammarSpec> grammar_spec(const GenerateFlags& f) {
  using Kind = structured::GrammarSpec::Kind;
  structured::GrammarSpec s;
  if (!f.json_schema_file.empty()) s = {Kind::kJsonSchema, read_text_file(f.json_schema_file, "--json-schema"), {}, true};
  else if (f.json_object) s = {Kind::kJsonObject, "", {}, true};
  else if (!f.regex.empty()) s = {Kind::kRegex, f.regex, {}, true};
  else if (!f.choices.empty()) s = {Kind::kChoice, "", f.choices, true};
  else if (!f.grammar_file.empty()) s = {Kind::kGrammar, read_text_file(f.grammar_file, "--grammar"), {}, true};
  else return std::nullopt;
  s.any_whitespace = !f.disable_any_whitespace;
  return s;
}

void print_speed(const engine::GenerationResult& r) {
  const auto generated = int64_t(r.tokens.size());
  std::fprintf(stderr, "fp8lm: prompt %lld tokens in %.3f s (%.1f tok/s); generated %lld tokens",
               static_cast<long long>(r.prompt_tokens), r.prefill_seconds,
               r.prefill_seconds > 0 ? double(r.prompt_tokens) / r.prefill_seconds : 0.0,
               static_cast<long long>(generated));
  if (generated > 1)
    std::fprintf(stderr, ", decode %.1f tok/s", double(generated - 1) / r.decode_seconds);
  std::fprintf(stderr, "; finish: %s\n", r.finish_reason.c_str());
  const engine::SpeculativeStats& sp = r.speculative;
  if (sp.steps > 0) {
    std::fprintf(stderr, "fp8lm: speculative: %lld verify steps, %lld of %lld drafted tokens accepted (%.1f %%), "
                 "mean accepted length %.2f; acceptance by draft position:",
                 static_cast<long long>(sp.steps), static_cast<long long>(sp.accepted),
                 static_cast<long long>(sp.drafted), 100.0 * sp.acceptance_rate(), sp.mean_accepted_length());
    for (size_t i = 0; i < sp.reached.size(); ++i)
      std::fprintf(stderr, " %.2f", sp.reached[i] > 0 ? double(sp.accepted_at[i]) / double(sp.reached[i]) : 0.0);
    std::fprintf(stderr, "\n");
  }
}

void run(const ModelFlags& mf, const RunFlags& rf, const SamplingFlags& sf, const GenerateFlags& gf) {
  std::string note;
  engine::SamplingParams params = sf.params(mf.model, &note);  // bad flags fail before the model loads
  const std::optional<engine::SpeculativeConfig> spec = speculative_config(gf.speculative_config);
  const std::optional<structured::GrammarSpec> constraint = grammar_spec(gf);
  if (constraint && spec)
    throw Error("structured outputs decode one token a step: --speculative-config is refused with a constraint");
  engine::RuntimeOptions options = rf.options();
  options.max_num_seqs = 1;  // one sequence: the KV cache and the step profile are for it alone
  std::string prompt = gf.prompt;
  if (gf.prompt_option->count() == 0) prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
  auto [draft, rt] = load_target_and_draft(mf.model, mf.overrides(), options, spec);
  print_load_summary(*rt, rf);
  add_model_eos(params, *rt, mf.model);
  std::fprintf(stderr, "fp8lm: %s\n", note.c_str());
  const std::vector<uint32_t> ids = rt->tokenizer().encode(prompt, !gf.no_special);
  const std::vector<int32_t> prompt_ids(ids.begin(), ids.end());
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if (constraint) {
    const structured::GrammarVocabulary vocabulary(rt->tokenizer(), std::filesystem::path(mf.model) / "tokenizer.json",
                                                   rt->model().vocab_size(), rt->eos_ids());
    structured::GrammarCompiler compiler(vocabulary);
    grammar = compiler.compile(*constraint);
  }
  engine::GenerationResult r;
  if (gf.json) {
    r = engine::generate(*rt, prompt_ids, params, {}, spec ? &*spec : nullptr, draft.get(), grammar);
    nlohmann::json out = {{"text", r.text},
                          {"prompt_ids", prompt_ids},
                          {"token_ids", r.tokens},
                          {"finish_reason", r.finish_reason},
                          {"prompt_tokens", r.prompt_tokens},
                          {"completion_tokens", r.tokens.size()},
                          {"prefill_seconds", r.prefill_seconds},
                          {"decode_seconds", r.decode_seconds}};
    if (spec) out["speculative"] = speculative_json(r.speculative);
    std::printf("%s\n", out.dump().c_str());
  } else {
    r = engine::generate(
        *rt, prompt_ids, params,
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        spec ? &*spec : nullptr, draft.get(), grammar);
    std::printf("\n");
  }
  print_speed(r);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion of a prompt, streamed to stdout");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto sf = add_sampling_flags(cmd);
  auto gf = std::make_shared<GenerateFlags>();
  gf->prompt_option = cmd->add_option("--prompt,-p", gf->prompt, "The prompt (read from stdin when not given)");
  cmd->add_flag("--json", gf->json, "Print one JSON object (text, token ids, timings) instead of streaming");
  cmd->add_flag("--no-special", gf->no_special, "Do not add the tokenizer's special tokens (BOS) to the prompt");
  add_speculative_config_flag(cmd, gf->speculative_config);
  auto* schema = cmd->add_option("--json-schema", gf->json_schema_file,
                                 "Constrain the output to JSON valid under the JSON schema in FILE (structured outputs)");
  auto* object = cmd->add_flag("--json-object", gf->json_object, "Constrain the output to a JSON object");
  auto* regex = cmd->add_option("--regex", gf->regex, "Constrain the output to a match of the regular expression R");
  auto* choice = cmd->add_option("--choice", gf->choices, "Constrain the output to one of these texts (repeat the flag)");
  auto* grammar = cmd->add_option("--grammar", gf->grammar_file,
                                  "Constrain the output to the EBNF grammar in FILE (xgrammar's syntax, root rule `root`)");
  cmd->add_flag("--disable-any-whitespace", gf->disable_any_whitespace,
                "JSON constraints without free whitespace: \", \" and \": \" separators only (vLLM's option; a small "
                "model given any whitespace may spend its tokens on it)");
  const std::vector<CLI::Option*> constraints = {schema, object, regex, choice, grammar};
  for (CLI::Option* a : constraints)
    for (CLI::Option* b : constraints)
      if (a != b) a->excludes(b);
  cmd->callback([mf, rf, sf, gf] { run(*mf, *rf, *sf, *gf); });
}

}  // namespace fp8lm::cli
