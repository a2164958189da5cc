// `fp8lm generate --model M --prompt TEXT`: one completion, streamed to stdout
// as it is generated; what was loaded and how fast it ran go to stderr, so
// the output pipes cleanly. `--json` prints one JSON object instead (text,
// token ids, finish reason, timings) for scripts and tests. `--speculative-config JSON` drafts
// tokens with the n-gram drafter and verifies them k + 1 at a time (engine/speculative.h).
// `--json-schema FILE`, `--json-object`, `--regex R`, `--choice C` (repeated) or `--grammar FILE`
// constrain the output (structured outputs through xgrammar, src/structured).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/grammar_flags.h"
#include "cli/model_flags.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/generate.h"

namespace fp8lm::cli {
namespace {

struct GenerateFlags {
  std::string prompt;
  CLI::Option* prompt_option = nullptr;
  bool json = false;
  bool no_special = false;
  std::string speculative_config;  // vLLM's --speculative-config JSON; empty: none
  GrammarFlags grammar;  // structured outputs
};

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
  const std::optional<structured::GrammarSpec> constraint = grammar_spec(gf.grammar, spec.has_value());
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
  if (constraint) grammar = compile_grammar(*constraint, *rt, mf.model);
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
  add_grammar_flags(cmd, gf->grammar);
  cmd->callback([mf, rf, sf, gf] { run(*mf, *rf, *sf, *gf); });
}

}  // namespace fp8lm::cli
