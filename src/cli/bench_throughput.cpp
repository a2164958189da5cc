// `fp8lm bench throughput MODEL --num-prompts N --input-len I --output-len O`:
// offline throughput of the batched engine (engine/engine.h), as vLLM's
// benchmark_throughput: N synthetic prompts of I tokens (fixed seed, the same
// ids bench latency draws), all added at t = 0, each generating exactly O
// tokens (EOS ignored, greedy), run to completion under the scheduler's limits
// (--max-num-seqs, --max-num-batched-tokens). Reports requests/s, output and
// total tokens/s, elapsed time, forward steps, preemptions, peak running
// sequences and the weight bandwidth achieved (weight bytes × forward steps /
// elapsed); a table on stdout, with --json FILE every number and the
// configuration. Without --kv-cache-tokens the cache holds min(N,
// max-num-seqs) whole sequences, so preemption only happens when asked for.
// --enable-prefix-caching with --prefix-len P (the first P of every prompt's
// I tokens the same) measures prefix caching and reports its hit rate.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "cli/grammar_flags.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/runtime.h"
#include "io/model_spec.h"

namespace fp8lm::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ThroughputFlags {
  int64_t num_prompts = 32;
  int64_t input_len = 128;
  int64_t output_len = 128;
  SchedulerFlags scheduler;
  int64_t max_num_batched_tokens = engine::SchedulerConfig{}.max_num_batched_tokens;
  int64_t prefix_len = 0;  // leading tokens every prompt shares
  std::string speculative_config;  // vLLM's --speculative-config JSON; empty: none
  GrammarFlags grammar;            // structured outputs: every request constrained alike
  std::string json;
};

void run_throughput(const ModelFlags& mf, const RunFlags& rf, const ThroughputFlags& tf) {
  check_positive("--num-prompts", tf.num_prompts);
  check_lengths(tf.input_len, tf.output_len);
  check_positive("--max-num-seqs", tf.scheduler.max_num_seqs);
  check_positive("--max-num-batched-tokens", tf.max_num_batched_tokens);
  engine::SchedulerConfig sched{tf.max_num_batched_tokens, tf.scheduler.max_num_seqs,
                                tf.scheduler.enable_prefix_caching, tf.scheduler.async_scheduling};
  if (tf.prefix_len < 0 || tf.prefix_len > tf.input_len)
    throw Error("--prefix-len: " + std::to_string(tf.prefix_len) + " must be between 0 and --input-len (" +
                std::to_string(tf.input_len) + ")");
  if (tf.max_num_batched_tokens < tf.scheduler.max_num_seqs)
    throw Error("--max-num-batched-tokens: " + std::to_string(tf.max_num_batched_tokens) +
                " must be at least --max-num-seqs (" + std::to_string(tf.scheduler.max_num_seqs) + ")");
  const std::optional<engine::SpeculativeConfig> spec = speculative_config(tf.speculative_config);
  const std::optional<structured::GrammarSpec> constraint = grammar_spec(tf.grammar, spec.has_value());
  engine::RuntimeOptions options = rf.options();
  const io::LoadOverrides overrides = mf.overrides();

  const int64_t context = max_model_len_for(rf, io::read_model_spec(mf.model, overrides).config.max_position_embeddings);
  if (tf.input_len + tf.output_len > context)
    throw Error("--input-len + --output-len: " + std::to_string(tf.input_len) + " + " +
                std::to_string(tf.output_len) + " = " + std::to_string(tf.input_len + tf.output_len) +
                " tokens is beyond the context of " + std::to_string(context) +
                " (--max-model-len, at most the model's max_position_embeddings)");
  // On a GPU the cache takes what --gpu-memory-utilization leaves (with room for one step).
  options.max_num_batched_tokens = tf.max_num_batched_tokens;
  options.max_num_seqs = tf.scheduler.max_num_seqs;
  const bool cache_sized_here = !options.kv_cache_sized() && options.device == backend::Device::kCpu;
  if (cache_sized_here)
    options.kv_cache_tokens = std::min(tf.num_prompts, tf.scheduler.max_num_seqs) *
                              engine::blocks_for_tokens(tf.input_len + tf.output_len, options.block_size) *
                              options.block_size;

  const std::string load_before = load_average();
  const auto load0 = Clock::now();
  auto [draft, rt] = load_target_and_draft(mf.model, overrides, options, spec);
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load0).count();
  print_load_summary(*rt, rf);

  auto prompts = synthetic_prompts(*rt, tf.num_prompts, tf.input_len);
  for (size_t i = 1; i < prompts.size(); ++i) std::copy_n(prompts[0].begin(), tf.prefix_len, prompts[i].begin());
  engine::Engine eng(*rt, sched, spec, draft.get());
  engine::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = int32_t(tf.output_len);
  params.ignore_eos = true;
  // Structured outputs: compiled once (a server's cache hit for every request after the first).
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  double compile_seconds = 0;
  if (constraint) grammar = compile_grammar(*constraint, *rt, mf.model, &compile_seconds);

  const std::optional<double> device0 = rt->ops().device_step_seconds();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  ProgressBar bar("bench throughput", "requests");
  int64_t finished = 0;
  const auto num_prompts = int64_t(prompts.size());
  for (const auto& p : prompts)
    eng.add_request({p, params,
                     [&](const engine::RequestOutput& o) {
                       if (o.finished) bar.update(++finished, num_prompts);
                     },
                     -1, true, true, grammar});
  const std::vector<engine::Completion> done = eng.run_to_completion();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  // Where the backend times its steps on a device: how long the device waited for the host
  // (scheduling, step metadata, sampling, detokenization) between steps.
  const std::optional<double> device1 = rt->ops().device_step_seconds();
  std::optional<double> device_busy;
  if (device0 && device1) device_busy = *device1 - *device0;

  int64_t output_tokens = 0;
  for (const engine::Completion& c : done) {
    // A constrained request ends where its grammar does (at --output-len at most).
    const bool short_ok = grammar && c.finish_reason == "stop" && !c.tokens.empty();
    if (int64_t(c.tokens.size()) != tf.output_len && !short_ok)
      throw Error("bench: request " + std::to_string(c.id) + " generated " + std::to_string(c.tokens.size()) +
                  " tokens instead of " + std::to_string(tf.output_len) + " (finish: " + c.finish_reason +
                  (c.error.empty() ? "" : ": " + c.error) + ")");
    output_tokens += int64_t(c.tokens.size());
  }
  if (int64_t(done.size()) != tf.num_prompts)
    throw Error("bench: " + std::to_string(done.size()) + " of " + std::to_string(tf.num_prompts) + " requests finished");
  const int64_t input_tokens = tf.num_prompts * tf.input_len;
  const int64_t steps = eng.num_steps();
  const double req_s = double(tf.num_prompts) / elapsed;
  const double out_tok_s = double(output_tokens) / elapsed;
  const double total_tok_s = double(input_tokens + output_tokens) / elapsed;
  const double weight_gb_s = double(rt->weight_bytes()) * double(steps) / elapsed / 1e9;

  const RunDescription run = describe_run(mf, rf, options, *rt);
  const std::string& model_name = run.model_name;
  const std::string& weights = run.weights;

  std::printf("fp8lm bench throughput: %s, weights %s, KV cache %s, %s\n", model_name.c_str(), weights.c_str(),
              run.kv_cache_dtype.c_str(), rt->backend_name().c_str());
  std::printf("%lld prompts, input %lld, output %lld; max-num-seqs %lld, max-num-batched-tokens %lld; %s\n",
              static_cast<long long>(tf.num_prompts), static_cast<long long>(tf.input_len),
              static_cast<long long>(tf.output_len), static_cast<long long>(tf.scheduler.max_num_seqs),
              static_cast<long long>(tf.max_num_batched_tokens),
              tf.scheduler.async_scheduling ? "async scheduling" : "no async scheduling");
  std::printf("  %-26s %12d\n", "threads", options.threads);
  std::printf("  %-26s %12.2f\n", "requests/s", req_s);
  std::printf("  %-26s %12.1f\n", "output tok/s", out_tok_s);
  std::printf("  %-26s %12.1f\n", "total tok/s", total_tok_s);
  std::printf("  %-26s %12.3f\n", "elapsed s", elapsed);
  std::printf("  %-26s %12.3f\n", "CPU s", cpu);
  std::printf("  %-26s %12lld\n", "forward steps", static_cast<long long>(steps));
  std::printf("  %-26s %12.3f\n", "ms / step", steps > 0 ? 1e3 * elapsed / double(steps) : 0.0);
  if (grammar) {
    std::printf("  %-26s %12s\n", "constraint", structured::kind_name(constraint->kind));
    std::printf("  %-26s %12.1f\n", "grammar compile ms", 1e3 * compile_seconds);
  }
  if (device_busy) {
    std::printf("  %-26s %12.1f\n", "device busy %", 100.0 * *device_busy / elapsed);
    std::printf("  %-26s %12.3f\n", "device idle ms / step",
                steps > 0 ? 1e3 * (elapsed - *device_busy) / double(steps) : 0.0);
  }
  std::printf("  %-26s %12lld\n", "preemptions", static_cast<long long>(eng.num_preemptions()));
  if (tf.scheduler.enable_prefix_caching)
    std::printf("  %-26s %12.3f\n", "prefix cache hit rate",
                eng.prefix_cache_queries() > 0 ? double(eng.prefix_cache_hits()) / double(eng.prefix_cache_queries()) : 0.0);
  std::printf("  %-26s %12lld\n", "peak running", static_cast<long long>(eng.peak_running()));
  const engine::SpeculativeStats st = eng.speculative_stats();
  if (spec) {
    std::printf("  %-26s %12.3f\n", "draft acceptance rate", st.acceptance_rate());
    std::printf("  %-26s %12.3f\n", "mean accepted length", st.mean_accepted_length());
  }
  std::printf("  %-26s %12.2f\n", "weight bandwidth GB/s", weight_gb_s);
  std::printf("  %-26s %12.1f\n", "weights MiB", double(rt->weight_bytes()) / double(1 << 20));
  std::printf("  %-26s %12.1f\n", "KV cache MiB", double(rt->kv_cache_bytes()) / double(1 << 20));

  if (tf.json.empty()) return;
  nlohmann::json out = {
      {"benchmark", "throughput"},
      {"config",
       run.config({
        {"num_prompts", tf.num_prompts},
        {"input_len", tf.input_len},
        {"output_len", tf.output_len},
        {"max_num_seqs", tf.scheduler.max_num_seqs},
        {"max_num_batched_tokens", tf.max_num_batched_tokens},
        {"enable_prefix_caching", tf.scheduler.enable_prefix_caching},
        {"async_scheduling", tf.scheduler.async_scheduling},
        {"prefix_len", tf.prefix_len},
        {"speculative_config", tf.speculative_config.empty() ? nlohmann::json(nullptr)
                                                             : nlohmann::json(tf.speculative_config)},
        {"constraint", constraint ? nlohmann::json({{"kind", structured::kind_name(constraint->kind)},
                                                    {"text", constraint->text},
                                                    {"any_whitespace", constraint->any_whitespace}})
                                  : nlohmann::json(nullptr)},
        {"sampling", "greedy, ignore_eos"},
        {"block_size", rt->block_size()},
        {"kv_cache_tokens", options.kv_cache_tokens},
        {"kv_cache_sized_for_benchmark", cache_sized_here},
        {"kv_cache_blocks", eng.kv_blocks_total()},
        {"cpu", cpu_model()},
        {"online_cpus", online_cpus()},
        {"load_average_before", load_before},
        {"load_average_after", load_average()},
        {"date", utc_now()},
        {"version", FP8LM_VERSION}})},
      {"results",
       {{"requests_per_s", req_s},
        {"output_tok_s", out_tok_s},
        {"total_tok_s", total_tok_s},
        {"elapsed_s", elapsed},
        {"cpu_s", cpu},
        {"num_requests", int64_t(done.size())},
        {"input_tokens", input_tokens},
        {"output_tokens", output_tokens},
        {"forward_steps", steps},
        {"grammar_compile_s", grammar ? nlohmann::json(compile_seconds) : nlohmann::json(nullptr)},
        {"preemptions", eng.num_preemptions()},
        {"prefix_cache_queries", eng.prefix_cache_queries()},
        {"prefix_cache_hits", eng.prefix_cache_hits()},
        {"peak_running", eng.peak_running()},
        {"speculative", spec ? speculative_json(st) : nlohmann::json(nullptr)},
        {"weight_bandwidth_gb_s", weight_gb_s},
        // The device's time in steps (Ops::device_step_seconds; null where the ops run on the host).
        {"device_busy_s", device_busy ? nlohmann::json(*device_busy) : nlohmann::json(nullptr)},
        {"device_idle_s", device_busy ? nlohmann::json(elapsed - *device_busy) : nlohmann::json(nullptr)},
        {"load_s", load_seconds}}},
      {"memory", {{"weight_bytes", rt->weight_bytes()}, {"kv_cache_bytes", rt->kv_cache_bytes()}}}};
  write_json_file(tf.json, out);
}

}  // namespace

void add_bench_throughput_command(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "throughput", "Many synthetic requests through the batched engine at once: requests/s, tokens/s");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto tf = std::make_shared<ThroughputFlags>();
  cmd->add_option("--num-prompts", tf->num_prompts, "Requests, all added at the start (default 32)");
  add_length_flags(cmd, tf->input_len, tf->output_len, "request");
  cmd->add_option("--max-num-batched-tokens", tf->max_num_batched_tokens,
                  "Token budget of one forward step; long prompts are prefilled in chunks (default 2048)");
  add_scheduler_flags(cmd, tf->scheduler, "reports the hit rate");
  cmd->add_option("--prefix-len", tf->prefix_len,
                  "Leading tokens (of --input-len) that every prompt shares, for prefix caching (default 0)");
  add_speculative_config_flag(cmd, tf->speculative_config);
  add_grammar_flags(cmd, tf->grammar);
  add_json_file_flag(cmd, tf->json);
  cmd->callback([mf, rf, tf] { run_throughput(*mf, *rf, *tf); });
}

}  // namespace fp8lm::cli
