// `fp8lm eval perplexity MODEL --data FILE`: perplexity on a text file
// (src/eval/perplexity.h has the protocol), and with `--kl-divergence-base
// BASE` how far the model's next-token distributions are from a base model's
// on the same tokens. The summary (or `--json`) goes to stdout, what was loaded
// and the running perplexity to stderr.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "eval/perplexity.h"
#include "io/model_spec.h"

namespace fp8lm::cli {
namespace {

struct PerplexityFlags {
  std::string data;
  int64_t ctx = 0;
  std::string protocol = "all";
  int batch = 1;
  int64_t limit_windows = 0;
  std::string base;
  std::string base_quantization, base_kv_cache_dtype;
  std::string json_file;
  CLI::Option* json_option = nullptr;
};

nlohmann::json to_json(const eval::PerplexityResult& r) {
  nlohmann::json j = {{"ppl", r.ppl},
                      {"nll_mean", r.nll_mean},
                      {"tokens_scored", r.tokens_scored},
                      {"windows", r.windows},
                      {"ctx", r.ctx},
                      {"protocol", std::string(eval::name(r.protocol))},
                      {"file_tokens", r.file_tokens},
                      {"seconds", r.seconds}};
  if (r.kld) {
    const eval::KldResult& k = *r.kld;
    j["base_ppl"] = k.base_ppl;
    j["base_nll_mean"] = k.base_nll_mean;
    j["delta_ppl"] = k.delta_ppl;
    j["delta_ppl_percent"] = k.delta_ppl_percent;
    j["kld_mean"] = k.mean;
    j["kld_median"] = k.median;
    j["kld_p99"] = k.p99;
    j["kld_max"] = k.max;
    j["top1_agreement"] = k.top1_agreement;
  }
  return j;
}

void print_summary(const eval::PerplexityResult& r) {
  std::printf("perplexity %.4f (mean NLL %.6f) over %lld tokens: %lld windows of %lld, protocol %s\n", r.ppl,
              r.nll_mean, static_cast<long long>(r.tokens_scored), static_cast<long long>(r.windows),
              static_cast<long long>(r.ctx), std::string(eval::name(r.protocol)).c_str());
  if (!r.kld) return;
  const eval::KldResult& k = *r.kld;
  std::printf("base perplexity %.4f; delta %+.4f (%+.3f %%)\n", k.base_ppl, k.delta_ppl, k.delta_ppl_percent);
  std::printf("KL divergence from the base: mean %.6f, median %.6f, p99 %.6f, max %.6f\n", k.mean, k.median, k.p99,
              k.max);
  std::printf("top-1 agreement with the base: %.4f %%\n", 100.0 * k.top1_agreement);
}

void run(const ModelFlags& mf, const RunFlags& rf, const PerplexityFlags& pf) {
  // Bad flags fail before anything loads.
  eval::PerplexityOptions opt;
  opt.protocol = eval::parse_protocol(pf.protocol);
  if (pf.batch < 1) throw Error("--batch: " + std::to_string(pf.batch) + " must be at least 1");
  if (pf.ctx != 0 && pf.ctx < 2) throw Error("--ctx: " + std::to_string(pf.ctx) + " is too small (at least 2)");
  if (pf.limit_windows < 0) throw Error("--limit-windows: " + std::to_string(pf.limit_windows) + " is negative");
  opt.batch = pf.batch;
  opt.limit_windows = pf.limit_windows;
  const io::LoadOverrides overrides = mf.overrides();
  io::LoadOverrides base_overrides;
  if (!pf.base_quantization.empty()) base_overrides.quantization = io::parse_online_quant(pf.base_quantization);
  if (!pf.base_kv_cache_dtype.empty())
    base_overrides.kv_cache_dtype = io::parse_kv_cache_dtype(pf.base_kv_cache_dtype);
  engine::RuntimeOptions options = rf.options();
  opt.threads = options.threads;

  // The KV cache holds `batch` windows at once, each at most --max-model-len.
  const ModelConfig config = io::read_model_spec(mf.model, overrides).config;
  const int64_t max_model_len = max_model_len_for(rf, config.max_position_embeddings);
  if (rf.max_model_len > 0 && pf.ctx > max_model_len)
    throw Error("--ctx: " + std::to_string(pf.ctx) + " is beyond --max-model-len (" + std::to_string(max_model_len) +
                ")");
  opt.ctx = pf.ctx > 0 ? pf.ctx : std::min(eval::default_ctx(config), max_model_len);
  if (options.kv_cache_bytes == 0)  // --kv-cache-memory given: that size, as asked
    options.kv_cache_tokens =
        std::max(options.kv_cache_tokens, eval::kv_tokens_for(opt.ctx, opt.batch, options.block_size));

  std::unique_ptr<engine::Runtime> rt = engine::Runtime::load(mf.model, overrides, options);
  print_load_summary(*rt, rf);
  std::unique_ptr<engine::Runtime> base;
  if (!pf.base.empty()) {
    // The base runs attention in float: --fp8-attention is the evaluated model's (compare it with
    // its own configuration without it through --base-kv-cache-dtype fp8).
    engine::RuntimeOptions base_options = options;
    base_options.fp8_attention = false;
    try {
      base = engine::Runtime::load(pf.base, base_overrides, base_options);
    } catch (const Error& e) {
      throw Error(std::string("--kl-divergence-base: ") + e.what());
    }
    std::fprintf(stderr, "fp8lm: base model %s:\n", pf.base.c_str());
    print_load_summary(*base, rf);
  }
  const std::vector<int32_t> tokens = eval::tokenize_file(rt->tokenizer(), pf.data);
  std::fprintf(stderr, "fp8lm: %s: %zu tokens\n", pf.data.c_str(), tokens.size());

  ProgressBar bar("perplexity", "windows");
  const eval::PerplexityResult r =
      eval::perplexity(*rt, tokens, opt, base.get(), [&](const eval::Progress& p) {
        char detail[96];
        std::snprintf(detail, sizeof detail, "ppl %.4f%s, %.0f tok/s", p.ppl,
                      p.base_ppl > 0 ? (", base ppl " + std::to_string(p.base_ppl)).c_str() : "",
                      p.seconds > 0 ? double(p.tokens_scored) / p.seconds : 0.0);
        bar.update(p.windows_done, p.windows, detail);
      });
  std::fprintf(stderr, "fp8lm: %lld windows in %.1f s\n", static_cast<long long>(r.windows), r.seconds);

  if (pf.json_option->count() == 0) {
    print_summary(r);
    return;
  }
  nlohmann::json j = to_json(r);
  j["model"] = mf.model;
  j["data"] = pf.data;
  if (base) j["base"] = pf.base;
  if (pf.json_file.empty()) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::ofstream out(pf.json_file);
  out << j.dump(1) << "\n";
  if (!out) throw Error("--json: cannot write " + pf.json_file);
  print_summary(r);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  CLI::App* eval_cmd = app.add_subcommand("eval", "Evaluate a model: perplexity, KL divergence from a base model");
  eval_cmd->require_subcommand(0, 1);
  eval_cmd->callback([eval_cmd] {
    if (eval_cmd->get_subcommands().empty())
      throw Error("eval: say what to evaluate: perplexity (see fp8lm eval --help)");
  });
  CLI::App* cmd = eval_cmd->add_subcommand(
      "perplexity", "Perplexity on a text file (windows of --ctx tokens), optionally KL divergence from a base model");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto pf = std::make_shared<PerplexityFlags>();
  cmd->add_option("--data", pf->data, "UTF-8 text file, tokenized whole")->required();
  cmd->add_option("--ctx", pf->ctx, "Tokens per window (default: the model's context, at most 2048)");
  cmd->add_option("--protocol", pf->protocol,
                  "Scored tokens: all (every token of a window but its first, the default) or second-half "
                  "(llama.cpp's: the second half of each window)");
  cmd->add_option("--batch", pf->batch, "Windows per forward call (the KV cache is sized for them)");
  cmd->add_option("--limit-windows", pf->limit_windows, "Evaluate only the first N windows (0 = all)");
  cmd->add_option("--kl-divergence-base", pf->base,
                  "Base model (same tokenizer vocabulary) to compare with: KL divergence, top-1 agreement, delta PPL");
  cmd->add_option("--base-quantization", pf->base_quantization,
                  "Load the base model with this --quantization (default: none, as stored)");
  cmd->add_option("--base-kv-cache-dtype", pf->base_kv_cache_dtype,
                  "KV cache element type of the base model (default: the checkpoint's, BF16)");
  pf->json_option = cmd->add_option("--json", pf->json_file,
                                    "Print the result as one JSON object, or write it to FILE (then the summary is "
                                    "printed too)")
                        ->expected(0, 1);
  cmd->callback([mf, rf, pf] { run(*mf, *rf, *pf); });
}

}  // namespace fp8lm::cli
