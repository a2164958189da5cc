// `fp8lm bench latency MODEL --batch-size B --input-len I --output-len O`:
// the latency of one batch of B synthetic prompts of I tokens, each extended
// by O tokens. Per iteration: the batched prefill, in forward calls of at most
// --max-num-batched-tokens rows (TTFT), then O − 1 batched decode steps of one
// token per sequence (TPOT), greedy argmax of each logits row computed where
// the logits are (LlamaModel::forward_greedy). Medians over iterations go to a
// table on stdout, and
// with --json FILE every number and the configuration to FILE. The model and
// KV cache come from engine::Runtime, so any backend the runtime loads onto
// is measured the same way (the measurement is cli/bench_latency, which bench
// sweep shares). With --profile, one more iteration runs with
// every op timed (Ops::set_op_profiling) and the ops' times per prefill and
// per decode step are printed next to the decode step's weight roofline.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_ceilings.h"
#include "cli/bench_common.h"
#include "cli/bench_latency.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/runtime.h"
#include "engine/speculative.h"
#include "io/model_spec.h"
#include "spec/model_tensors.h"

namespace fp8lm::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The measurement's parameters (output_len, warmup, iters, max_batched_tokens) and the command's own.
struct LatencyFlags : LatencyRun {
  int64_t batch_size = 1;
  int64_t input_len = 128;
  std::string json;
  bool profile = false;
  std::string roofline_bandwidth;  // the copy bandwidth the decode shares are of; empty: the H200's
};

struct DeviceMemory {
  bool gpu = false;
  double peak_bytes = 0;  // fp8lm's device allocations at their peak (weights, KV cache, scratch)
  double used_bytes = 0;  // the device's memory in use now (all processes, CUDA context included)
  double total_bytes = 0;
};

// A backend with a device memory of its own reports it (memory_info); the CPU does not.
DeviceMemory device_memory(engine::Runtime& rt) {
  DeviceMemory m;
  if (const std::optional<backend::MemoryInfo> info = rt.ops().memory_info()) {
    m.gpu = true;
    m.peak_bytes = double(info->peak_bytes_reserved);
    m.used_bytes = double(info->total_bytes - info->free_bytes);
    m.total_bytes = double(info->total_bytes);
  }
  return m;
}

// 2 · parameters of the linear layers a token runs through (lm_head included, an MoE layer's
// routed experts at top_k of num_experts): the GEMM work of one token. From the architecture's
// module list, so that MLA's projections and DeepSeek's shared experts count as they are.
double linear_flops_per_token(const ModelConfig& c) {
  double dense = 0.0, experts = 0.0;
  for (const LinearModule& m : linear_modules(c))
    (m.kind == LinearKind::kExpert ? experts : dense) += double(m.out_features) * double(m.in_features);
  if (c.tie_word_embeddings) dense += double(c.hidden_size) * double(c.vocab_size);
  const double active = c.is_moe() ? double(c.moe.num_experts_per_tok) / double(c.moe.num_experts) : 0.0;
  return 2.0 * (dense + experts * active);
}

struct Memory {
  int64_t rss_kib = -1;  // VmRSS
  int64_t hwm_kib = -1;  // VmHWM (peak RSS)
};

double mib(double bytes) { return bytes / double(1 << 20); }

// "VmRSS:   12345 kB" → 12345; -1 when /proc is unavailable.
Memory read_memory() {
  Memory m;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    auto value = [&](const char* key, int64_t& out) {
      const std::string k(key);
      if (line.compare(0, k.size(), k) == 0) out = std::stoll(line.substr(k.size()));
    };
    value("VmRSS:", m.rss_kib);
    value("VmHWM:", m.hwm_kib);
  }
  return m;
}







// --profile: one phase (prefill or decode) of the profiled iteration: the ops'
// times summed over its `steps` forward calls, and the step times to compare
// them with — the timed iterations' (decode steps replayed from a recorded
// graph where the backend records them) and the profiled iteration's own.
struct PhaseProfile {
  const char* kind = "";          // "prefill" or "decode"
  int64_t steps = 0;
  std::vector<backend::OpProfileEntry> ops;
  double timed_step_s = 0.0;      // TTFT / forward calls, or the median TPOT
  double profiled_step_s = 0.0;   // the profiled iteration's mean step (the ops' times are sums too)
};

constexpr const char* kProfileMethod =
    "each op timed alone in one more iteration; on a GPU two events per op add ~2 us each and steps run op by "
    "op instead of as a recorded graph, so the ops' sum can exceed the timed iterations' step";

// Largest first; ops timed inside another (nested) after the rest.
std::vector<backend::OpProfileEntry> sorted_ops(std::vector<backend::OpProfileEntry> ops) {
  std::stable_sort(ops.begin(), ops.end(), [](const backend::OpProfileEntry& a, const backend::OpProfileEntry& b) {
    return a.nested != b.nested ? b.nested : a.seconds > b.seconds;
  });
  return ops;
}

// The seconds per step of the ops that are not inside another one.
double ops_sum_per_step(const PhaseProfile& p) {
  double sum = 0.0;
  for (const backend::OpProfileEntry& e : p.ops)
    if (!e.nested) sum += e.seconds;
  return sum / double(p.steps);
}

// The seconds per step of tensor parallelism's collectives (all-reduce, all-gather): time in the
// transport, waiting for the other ranks included.
double collectives_per_step(const PhaseProfile& p) {
  double sum = 0.0;
  for (const backend::OpProfileEntry& e : p.ops)
    if (!e.nested && (e.op.rfind("all_reduce", 0) == 0 || e.op.rfind("all_gather", 0) == 0)) sum += e.seconds;
  return sum / double(p.steps);
}

// An op's name, with the backend's step kind where it differs from the phase's
// (a prefill of one-token prompts is a decode step to the backend).
std::string profile_op_name(const PhaseProfile& p, const backend::OpProfileEntry& e) {
  return e.step == p.kind ? e.op : e.op + " [" + e.step + "]";
}

void print_phase_profile(const PhaseProfile& p) {
  const double sum = ops_sum_per_step(p);
  std::printf("\nop profile, %s: %lld forward call%s per iteration\n", p.kind, static_cast<long long>(p.steps),
              p.steps == 1 ? "" : "s");
  std::printf("  %-44s %11s %10s %7s\n", "op", "us/step", "calls/step", "share");
  bool nested_header = false;
  for (const backend::OpProfileEntry& e : sorted_ops(p.ops)) {
    if (e.nested && !nested_header) {
      std::printf("  inside the ops above (not in the sum):\n");
      nested_header = true;
    }
    const double per_step = e.seconds / double(p.steps);
    std::printf("  %-44s %11.2f %10.2f %6.1f%%\n", profile_op_name(p, e).c_str(), per_step * 1e6,
                double(e.calls) / double(p.steps), sum > 0 ? 100.0 * per_step / sum : 0.0);
  }
  std::printf("  %-44s %11.2f\n", "sum of the ops", sum * 1e6);
  if (const double c = collectives_per_step(p); c > 0)
    std::printf("  %-44s %11.2f %10s %6.1f%%\n", "of which collectives (tensor parallelism)", c * 1e6, "",
                100.0 * c / sum);
  std::printf("  %-44s %11.2f   (the ops' sum is %.0f%% of it)\n",
              p.kind == std::string("decode") ? "step in the timed iterations (median TPOT)"
                                              : "step in the timed iterations (TTFT / calls)",
              p.timed_step_s * 1e6, 100.0 * sum / p.timed_step_s);
  std::printf("  %-44s %11.2f\n", "step in the profiled iteration (mean)", p.profiled_step_s * 1e6);
}

nlohmann::json phase_profile_json(const PhaseProfile& p) {
  const double sum = ops_sum_per_step(p);
  nlohmann::json ops = nlohmann::json::array();
  for (const backend::OpProfileEntry& e : sorted_ops(p.ops)) {
    const double per_step = e.seconds / double(p.steps);
    ops.push_back({{"op", e.op},
                   {"step", e.step},
                   {"s_per_step", per_step},
                   {"calls_per_step", double(e.calls) / double(p.steps)},
                   {"share", e.nested || sum <= 0 ? nlohmann::json(nullptr) : nlohmann::json(per_step / sum)},
                   {"nested", e.nested}});
  }
  return {{"steps_per_iteration", p.steps},
          {"ops", ops},
          {"ops_sum_s_per_step", sum},
          {"collectives_s_per_step", collectives_per_step(p)},
          {"timed_step_s", p.timed_step_s},
          {"profiled_step_s", p.profiled_step_s}};
}

// The decode step against the copy-bandwidth ceiling: every weight byte read
// once per step (what "decode weight GB/s" assumes), nothing else.
struct DecodeRoofline {
  double weight_bytes = 0.0;
  double step_s = 0.0;  // weight_bytes at the copy ceiling (every rank's GPU reading its share)
  double tok_s = 0.0;   // batch / step_s
  double share = 0.0;   // step_s / median TPOT
};

// The profiled iteration, after the timed ones: the ops' times of its prefill
// and of its decode steps, each phase read from the backend separately.
struct LatencyProfile {
  PhaseProfile prefill, decode;
};

LatencyProfile run_profiled_iteration(engine::Runtime& rt, const std::vector<std::vector<int32_t>>& prompts,
                                      const LatencyFlags& lf) {
  backend::Ops& ops = rt.ops();
  LatencyProfile p;
  p.prefill.kind = "prefill";
  p.decode.kind = "decode";
  ops.clear_op_profile();
  ops.set_op_profiling(true);
  IterationResult r;
  try {
    r = run_iteration(
        rt, prompts, lf.output_len, lf.max_batched_tokens,
        [&] {
          p.prefill.ops = ops.op_profile();
          ops.clear_op_profile();
        },
        lf.verify_tokens);
  } catch (...) {
    ops.set_op_profiling(false);
    throw;
  }
  p.decode.ops = ops.op_profile();
  ops.set_op_profiling(false);
  ops.clear_op_profile();
  p.prefill.steps = r.prefill_calls;
  p.prefill.profiled_step_s = r.ttft / double(r.prefill_calls);
  p.decode.steps = int64_t(r.steps.size());
  p.decode.profiled_step_s = r.tpot_mean;
  return p;
}


void run_latency(const ModelFlags& mf, const RunFlags& rf, const LatencyFlags& lf) {
  check_positive("--batch-size", lf.batch_size);
  check_latency_flags(lf.input_len, lf);
  if (lf.verify_tokens < 1 || lf.verify_tokens > engine::kMaxSpeculativeTokens + 1)
    throw Error("--verify-tokens: " + std::to_string(lf.verify_tokens) + " is outside 1 … " +
                std::to_string(engine::kMaxSpeculativeTokens + 1));
  const double copy_ceiling =
      lf.roofline_bandwidth.empty() ? kCeilingBytesPerS : parse_bandwidth(lf.roofline_bandwidth, "--roofline-bandwidth");
  engine::RuntimeOptions options = rf.options();
  const io::LoadOverrides overrides = mf.overrides();

  // The context check needs only config.json; it runs before the KV cache is sized.
  const int64_t context = max_model_len_for(rf, io::read_model_spec(mf.model, overrides).config.max_position_embeddings);
  // A verify step's extra positions (--verify-tokens) need room in the context and the cache.
  prepare_latency_options(options, context, lf.batch_size, lf.input_len, lf.output_len + lf.verify_tokens - 1,
                          lf.max_batched_tokens);

  const std::string load_before = load_average();
  const Memory before_load = read_memory();
  const auto load0 = Clock::now();
  std::unique_ptr<engine::Runtime> rt = engine::Runtime::load(mf.model, overrides, options);
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load0).count();
  print_load_summary(*rt, rf);
  const Memory after_load = read_memory();
  if (lf.profile && !rt->ops().set_op_profiling(false))
    throw Error("--profile: the backend " + rt->backend_name() + " cannot time its ops");

  const auto prompts = synthetic_prompts(*rt, lf.batch_size, lf.input_len);
  ProgressBar bar("bench latency", "iterations (warm-up included)");
  const LatencySummary summary = measure_latency(
      *rt, prompts, lf,
      [&](int64_t done, int64_t total, double last_s) {
        char detail[48] = "";
        if (last_s >= 0) std::snprintf(detail, sizeof detail, "last %.3f s", last_s);
        bar.update(done, total, detail);
      });
  const std::vector<IterationResult>& its = summary.iterations;
  const DeviceMemory gpu = device_memory(*rt);
  const Memory at_end = read_memory();
  std::optional<LatencyProfile> profile;
  if (lf.profile) profile = run_profiled_iteration(*rt, prompts, lf);

  const bool has_decode = lf.output_len > 1;
  const double ttft = summary.ttft, prefill = summary.prefill_tok_s;
  const double tpot_mean = summary.tpot_mean, tpot_median = summary.tpot_median;
  const double decode = summary.decode_tok_s, total = summary.total;
  const double cpu = summary.cpu;
  // The share of the machine other processes took during the timed iterations.
  const double others_share = summary.others_share;

  const RunDescription run = describe_run(mf, rf, options, *rt);
  const std::string& model_name = run.model_name;
  const std::string& weights = run.weights;

  std::printf("fp8lm bench latency: %s, weights %s, KV cache %s, %s\n", model_name.c_str(), weights.c_str(),
              run.kv_cache_dtype.c_str(), rt->backend_name().c_str());
  std::printf("batch %lld, input %lld, output %lld; %lld warmup + %lld timed iterations (medians)\n",
              static_cast<long long>(lf.batch_size), static_cast<long long>(lf.input_len),
              static_cast<long long>(lf.output_len), static_cast<long long>(lf.warmup),
              static_cast<long long>(lf.iters));
  std::printf("  %-26s %12d\n", "threads", options.threads);
  std::printf("  %-26s %12.1f\n", "prefill tok/s", prefill);
  std::printf("  %-26s %12.2f\n", "TTFT ms", ttft * 1e3);
  if (has_decode) {
    std::printf("  %-26s %12.1f\n", "decode tok/s", decode);
    std::printf("  %-26s %12.3f\n", "TPOT median ms", tpot_median * 1e3);
    std::printf("  %-26s %12.3f\n", "TPOT mean ms", tpot_mean * 1e3);
  }
  std::printf("  %-26s %12.3f\n", "iteration s", total);
  std::printf("  %-26s %12.3f\n", "iteration CPU s", cpu);
  std::printf("  %-26s %11.1f%%\n", "other processes' CPU", 100.0 * others_share);
  // How far from the limits: decode reads every weight once per step (of the embedding table only
  // its tokens' rows); prefill is the linear layers' GEMM work over the prompt tokens.
  const bool fp8_weights = weights.rfind("FP8", 0) == 0;
  // The bytes a decode step reads: every weight, or an MoE model's dense ones and routed experts.
  // With tensor parallelism each GPU reads and computes its share: the ceilings are the group's.
  const auto ranks = double(rt->tensor_parallel_size());
  const double bytes_ceiling = copy_ceiling * ranks;
  const double weight_bw = has_decode ? rt->decode_weight_bytes(lf.batch_size) / tpot_median : 0.0;
  const double gemm_rate = linear_flops_per_token(rt->config()) * double(lf.batch_size * lf.input_len) / ttft;
  const double gemm_ceiling = (fp8_weights ? kCeilingFp8FlopS : kCeilingBf16FlopS) * ranks;
  const std::string of_ranks = ranks > 1 ? " × " + std::to_string(int(ranks)) + " ranks" : "";
  const int64_t kv_tokens = rt->blocks().num_total() * rt->block_size();
  if (has_decode)
    std::printf("  %-26s %12.1f   (%.0f%% of %.2f TB/s%s)\n", "decode weight GB/s", weight_bw / 1e9,
                100.0 * weight_bw / bytes_ceiling, bytes_ceiling / 1e12, of_ranks.c_str());
  std::printf("  %-26s %12.1f   (%.0f%% of %s %.0f%s)\n", "prefill linear TFLOP/s", gemm_rate / 1e12,
              100.0 * gemm_rate / gemm_ceiling, fp8_weights ? "FP8" : "BF16", gemm_ceiling / 1e12, of_ranks.c_str());
  if (ranks > 1) std::printf("  %-26s %12d   (KV cache and GPU figures below: rank 0's)\n", "tensor-parallel ranks", int(ranks));
  std::printf("  %-26s %12.1f\n", "weights MiB", mib(double(rt->weight_bytes())));
  std::printf("  %-26s %12.1f\n", "KV cache MiB", mib(double(rt->kv_cache_bytes())));
  std::printf("  %-26s %12lld\n", "KV cache tokens", static_cast<long long>(kv_tokens));
  if (gpu.gpu) {
    std::printf("  %-26s %12.1f   (the weights' upload, before the KV cache)\n", "GPU peak at load MiB",
                mib(double(rt->load_peak_device_bytes())));
    std::printf("  %-26s %12.1f\n", "GPU peak (fp8lm) MiB", mib(gpu.peak_bytes));
    std::printf("  %-26s %12.1f   (of %.0f)\n", "GPU in use MiB", mib(gpu.used_bytes), mib(gpu.total_bytes));
  }
  std::printf("  %-26s %12.1f\n", "RSS after load MiB", double(after_load.rss_kib) / 1024.0);
  std::printf("  %-26s %12.1f\n", "RSS at end MiB", double(at_end.rss_kib) / 1024.0);
  std::printf("  %-26s %12.1f\n", "RSS peak MiB", double(at_end.hwm_kib) / 1024.0);

  std::optional<DecodeRoofline> roofline;
  if (profile) {
    profile->prefill.timed_step_s = ttft / double(its[0].prefill_calls);
    profile->decode.timed_step_s = tpot_median;
    std::printf("\n%s.\n", kProfileMethod);
    print_phase_profile(profile->prefill);
    if (has_decode) {
      print_phase_profile(profile->decode);
      DecodeRoofline& rl = roofline.emplace();
      rl.weight_bytes = rt->decode_weight_bytes(lf.batch_size);
      rl.step_s = rl.weight_bytes / bytes_ceiling;
      rl.tok_s = double(lf.batch_size) / rl.step_s;
      rl.share = rl.step_s / tpot_median;
      std::printf("\ndecode roofline: %s read once per step, %s, at %.2f TB/s\n",
                  rt->config().is_moe() ? "the dense weights and the experts routed to" : "every weight",
                  rt->embedding_table().tied ? "the embedding table whole (it is lm_head too)"
                                             : "of the embedding table the rows of the step's tokens",
                  bytes_ceiling / 1e12);
      std::printf("  %-26s %12.1f\n", "weight MiB per step", mib(rl.weight_bytes));
      std::printf("  %-26s %12.2f   (%.1f tok/s at batch %lld)\n", "roofline step us", rl.step_s * 1e6, rl.tok_s,
                  static_cast<long long>(lf.batch_size));
      std::printf("  %-26s %12.2f   (%.1f%% of the roofline)\n", "TPOT median us", tpot_median * 1e6,
                  100.0 * rl.share);
    }
  }

  if (lf.json.empty()) return;
  auto per_iteration = [&](double IterationResult::*field) {
    std::vector<double> v;
    for (const IterationResult& r : its) v.push_back(r.*field);
    return v;
  };
  auto or_null = [&](double v) { return has_decode ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json out = {
      {"benchmark", "latency"},
      {"config",
       run.config({
        {"batch_size", lf.batch_size},
        {"input_len", lf.input_len},
        {"output_len", lf.output_len},
        {"verify_tokens", lf.verify_tokens},
        {"warmup", lf.warmup},
        {"iters", lf.iters},
        {"block_size", rt->block_size()},
        {"kv_cache_tokens", options.kv_cache_tokens},
        {"cpu", cpu_model()},
        {"online_cpus", online_cpus()},
        {"load_average_before", load_before},
        {"load_average_after", load_average()},
        {"date", utc_now()},
        {"version", FP8LM_VERSION}})},
      {"results",
       {{"ttft_s", ttft},
        {"prefill_tok_s", prefill},
        {"tpot_median_s", or_null(tpot_median)},
        {"tpot_mean_s", or_null(tpot_mean)},
        {"decode_tok_s", or_null(decode)},
        {"iteration_s", total},
        {"iteration_cpu_s", cpu},
        {"other_processes_cpu_share", others_share},
        {"load_s", load_seconds},
        {"decode_weight_bytes_per_s", or_null(weight_bw)},
        {"decode_weight_bandwidth_share", or_null(weight_bw / bytes_ceiling)},
        {"prefill_linear_flop_per_s", gemm_rate},
        {"prefill_linear_flop_share", gemm_rate / gemm_ceiling},
        {"ceilings", {{"copy_bytes_per_s", copy_ceiling}, {"bf16_flop_per_s", kCeilingBf16FlopS},
                      {"fp8_flop_per_s", kCeilingFp8FlopS}}}}},
      {"per_iteration",
       {{"ttft_s", per_iteration(&IterationResult::ttft)},
        {"prefill_tok_s", per_iteration(&IterationResult::prefill_tok_s)},
        {"tpot_median_s", per_iteration(&IterationResult::tpot_median)},
        {"tpot_mean_s", per_iteration(&IterationResult::tpot_mean)},
        {"decode_tok_s", per_iteration(&IterationResult::decode_tok_s)},
        {"iteration_s", per_iteration(&IterationResult::total)},
        {"iteration_cpu_s", per_iteration(&IterationResult::cpu)},
        {"other_processes_cpu_s", per_iteration(&IterationResult::others)}}},
      {"memory",
       {{"weight_bytes", rt->weight_bytes()},
        {"embedding", embedding_json(rt->embedding_table())},
        {"decode_weight_bytes", rt->decode_weight_bytes(lf.batch_size)},
        {"kv_cache_bytes", rt->kv_cache_bytes()},
        {"kv_cache_bytes_per_token", kv_cache_bytes_per_token(*rt)},
        {"kv_cache_tokens", kv_tokens},
        {"gpu_peak_bytes", gpu.gpu ? nlohmann::json(gpu.peak_bytes) : nlohmann::json(nullptr)},
        {"gpu_load_peak_bytes", gpu.gpu ? nlohmann::json(rt->load_peak_device_bytes()) : nlohmann::json(nullptr)},
        {"gpu_used_bytes", gpu.gpu ? nlohmann::json(gpu.used_bytes) : nlohmann::json(nullptr)},
        {"rss_before_load_kib", before_load.rss_kib},
        {"rss_after_load_kib", after_load.rss_kib},
        {"rss_peak_after_load_kib", after_load.hwm_kib},
        {"rss_end_kib", at_end.rss_kib},
        {"rss_peak_kib", at_end.hwm_kib}}}};
  out["profile"] = nullptr;
  if (profile) {
    nlohmann::json rl = nullptr;
    if (roofline)
      rl = {{"weight_bytes_per_step", roofline->weight_bytes},
            {"ceiling_bytes_per_s", bytes_ceiling},
            {"step_s", roofline->step_s},
            {"tok_s", roofline->tok_s},
            {"share", roofline->share}};
    out["profile"] = {{"method", kProfileMethod},
                      {"prefill", phase_profile_json(profile->prefill)},
                      {"decode", has_decode ? phase_profile_json(profile->decode) : nlohmann::json(nullptr)},
                      {"decode_roofline", rl}};
  }
  write_json_file(lf.json, out);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure the model's speed and memory");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand(
      "latency", "One batch of synthetic prompts: prefill (TTFT) and decode (TPOT) times, tok/s, memory");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto lf = std::make_shared<LatencyFlags>();
  cmd->add_option("--batch-size", lf->batch_size, "Sequences run together (default 1)");
  add_latency_flags(cmd, lf->input_len, *lf);
  cmd->add_option("--verify-tokens", lf->verify_tokens,
                  "Tokens each sequence feeds a decode step (default 1): k + 1 times a speculative verify step of k "
                  "drafted tokens, every position's logits computed (issue 42); TPOT is then the verify step's time");
  add_json_file_flag(cmd, lf->json);
  cmd->add_option("--roofline-bandwidth", lf->roofline_bandwidth,
                  "Memory bandwidth the decode shares and roofline are of, in bytes/s: the card's measured copy "
                  "bandwidth, e.g. 3.02T on an H100 (default: the H200's 4.29T)");
  cmd->add_flag("--profile", lf->profile,
                "One more iteration with every op timed: where each prefill and decode step's time goes, and the "
                "decode step's share of the weight-bandwidth roofline");
  cmd->callback([mf, rf, lf] { run_latency(*mf, *rf, *lf); });
  add_bench_throughput_command(*bench);  // bench_throughput.cpp
  add_bench_structured_command(*bench);  // bench_structured.cpp
  add_bench_serve_command(*bench);       // bench_serve.cpp
  add_bench_sweep_command(*bench);       // bench_sweep.cpp
  add_bench_report_command(*bench);      // bench_sweep.cpp
}

}  // namespace fp8lm::cli
