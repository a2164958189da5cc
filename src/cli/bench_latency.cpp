#include "cli/bench_latency.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <optional>

#include "cli/bench_common.h"
#include "common/error.h"

namespace fp8lm::cli {
namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds every core of the machine has spent busy since boot (/proc/stat's
// "cpu" line less idle and iowait); -1 without /proc.
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu") return -1.0;
  return double(user + nice + system + irq + softirq + steal) / double(sysconf(_SC_CLK_TCK));
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

IterationResult run_iteration(engine::Runtime& rt, const std::vector<std::vector<int32_t>>& prompts,
                              int64_t output_len, int64_t max_batched_tokens,
                              const std::function<void()>& after_prefill, int64_t verify_tokens) {
  const auto batch = int64_t(prompts.size());
  const auto input_len = int64_t(prompts[0].size());
  const int64_t blocks_each = engine::blocks_for_tokens(input_len + output_len + verify_tokens - 1, rt.block_size());

  struct Tables {
    engine::BlockAllocator& alloc;
    std::vector<std::vector<int64_t>> t;
    ~Tables() {
      for (const auto& b : t) alloc.free(b);
    }
  } tables{rt.blocks(), {}};
  for (int64_t b = 0; b < batch; ++b) {
    std::optional<std::vector<int64_t>> got = rt.blocks().allocate(blocks_each);
    if (!got)
      throw Error("bench: the KV cache is full: " + std::to_string(batch) + " sequences need " +
                  std::to_string(blocks_each) + " blocks each, " + std::to_string(rt.blocks().num_free()) +
                  " are free (--kv-cache-tokens too small?)");
    tables.t.push_back(std::move(*got));
  }

  IterationResult r;
  std::vector<int32_t> next(static_cast<size_t>(batch));
  std::vector<model::SequenceInput> inputs(static_cast<size_t>(batch));

  const double cpu0 = process_cpu_seconds(), busy0 = machine_busy_seconds();
  const auto t0 = Clock::now();
  // The prompts go in forward calls of at most max_batched_tokens rows (whole
  // prompts, at least one per call), as a serving engine's step budget would.
  for (int64_t first = 0; first < batch;) {
    int64_t last = first + 1;
    while (last < batch && (last + 1 - first) * input_len <= max_batched_tokens) ++last;
    std::vector<model::SequenceInput> part;
    for (int64_t b = first; b < last; ++b) part.push_back({prompts[size_t(b)], 0, tables.t[size_t(b)], false});
    std::vector<int32_t> got;
    rt.model().forward_greedy(part, got);
    std::copy(got.begin(), got.end(), next.begin() + first);
    first = last;
    ++r.prefill_calls;
  }
  const auto t1 = Clock::now();
  r.ttft = std::chrono::duration<double>(t1 - t0).count();
  r.prefill_tok_s = double(batch * input_len) / r.ttft;
  if (after_prefill) after_prefill();

  r.steps.reserve(size_t(std::max<int64_t>(0, output_len - 1)));
  std::vector<std::vector<int32_t>> fed(static_cast<size_t>(batch), std::vector<int32_t>(size_t(verify_tokens)));
  std::vector<int32_t> verified;
  for (int64_t s = 1; s < output_len; ++s) {
    const auto s0 = Clock::now();
    if (verify_tokens == 1) {
      for (int64_t b = 0; b < batch; ++b)
        inputs[size_t(b)] = {{&next[size_t(b)], 1}, input_len + s - 1, tables.t[size_t(b)], false};
      rt.model().forward_greedy(inputs, next);
    } else {
      for (int64_t b = 0; b < batch; ++b) {
        std::fill(fed[size_t(b)].begin(), fed[size_t(b)].end(), next[size_t(b)]);
        inputs[size_t(b)] = {fed[size_t(b)], input_len + s - 1, tables.t[size_t(b)], true};
      }
      rt.model().forward_greedy(inputs, verified);
      for (int64_t b = 0; b < batch; ++b) next[size_t(b)] = verified[size_t(b * verify_tokens)];
    }
    r.steps.push_back(std::chrono::duration<double>(Clock::now() - s0).count());
  }
  r.total = std::chrono::duration<double>(Clock::now() - t0).count();
  r.cpu = process_cpu_seconds() - cpu0;
  if (busy0 >= 0) r.others = std::max(0.0, machine_busy_seconds() - busy0 - r.cpu);
  if (!r.steps.empty()) {
    r.tpot_mean = std::accumulate(r.steps.begin(), r.steps.end(), 0.0) / double(r.steps.size());
    r.tpot_median = median(r.steps);
    r.decode_tok_s = double(batch) / r.tpot_median;
  }
  return r;
}

LatencySummary measure_latency(engine::Runtime& rt, const std::vector<std::vector<int32_t>>& prompts,
                               const LatencyRun& run,
                               const std::function<void(int64_t, int64_t, double)>& progress) {
  const int64_t runs = run.warmup + run.iters;
  for (int64_t i = 0; i < run.warmup; ++i) {
    run_iteration(rt, prompts, run.output_len, run.max_batched_tokens, {}, run.verify_tokens);
    if (progress) progress(i + 1, runs, -1.0);
  }
  LatencySummary s;
  for (int64_t i = 0; i < run.iters; ++i) {
    s.iterations.push_back(run_iteration(rt, prompts, run.output_len, run.max_batched_tokens, {}, run.verify_tokens));
    if (progress) progress(run.warmup + i + 1, runs, s.iterations.back().total);
  }
  auto med = [&](double IterationResult::*field) {
    std::vector<double> v;
    for (const IterationResult& r : s.iterations) v.push_back(r.*field);
    return median(v);
  };
  s.ttft = med(&IterationResult::ttft);
  s.prefill_tok_s = med(&IterationResult::prefill_tok_s);
  s.tpot_mean = med(&IterationResult::tpot_mean);
  s.tpot_median = med(&IterationResult::tpot_median);
  s.decode_tok_s = med(&IterationResult::decode_tok_s);
  s.total = med(&IterationResult::total);
  s.cpu = med(&IterationResult::cpu);
  double wall_sum = 0.0, others_sum = 0.0;
  for (const IterationResult& r : s.iterations) wall_sum += r.total, others_sum += r.others;
  s.others_share = wall_sum > 0 ? others_sum / (wall_sum * online_cpus()) : 0.0;
  return s;
}

void prepare_latency_options(engine::RuntimeOptions& options, int64_t context, int64_t max_batch, int64_t input_len,
                             int64_t output_len, int64_t max_batched_tokens) {
  if (input_len + output_len > context)
    throw Error("--input-len + --output-len: " + std::to_string(input_len) + " + " + std::to_string(output_len) +
                " = " + std::to_string(input_len + output_len) + " tokens is beyond the context of " +
                std::to_string(context) + " (--max-model-len, at most the model's max_position_embeddings)");
  const int64_t needed =
      max_batch * engine::blocks_for_tokens(input_len + output_len, options.block_size) * options.block_size;
  if (options.kv_cache_tokens > 0 && options.kv_cache_tokens < needed)
    throw Error("--kv-cache-tokens: " + std::to_string(options.kv_cache_tokens) + " cannot hold " +
                std::to_string(max_batch) + " sequences of " + std::to_string(input_len + output_len) + " tokens (" +
                std::to_string(needed) + " in blocks of " + std::to_string(options.block_size) +
                "); leave it out to size the cache for the benchmark");
  // On the CPU the cache is sized for the benchmark; on a GPU it takes what
  // --gpu-memory-utilization leaves, which is the capacity reported.
  if (!options.kv_cache_sized() && options.device == backend::Device::kCpu) options.kv_cache_tokens = needed;
  check_positive("--max-num-batched-tokens", max_batched_tokens);
  options.max_num_batched_tokens = std::max(max_batched_tokens, input_len);
  options.max_num_seqs = max_batch;
}

void add_latency_flags(CLI::App* cmd, int64_t& input_len, LatencyRun& run, const std::string& each) {
  add_length_flags(cmd, input_len, run.output_len, "sequence");
  cmd->add_option("--warmup", run.warmup, "Untimed iterations first" + each + " (default 1)");
  cmd->add_option("--iters", run.iters, "Timed iterations" + each + "; medians are reported (default 3)");
  cmd->add_option("--max-num-batched-tokens", run.max_batched_tokens,
                  "Most prompt tokens one prefill forward call takes (whole prompts; default 16384)");
}

void check_latency_flags(int64_t input_len, const LatencyRun& run) {
  check_lengths(input_len, run.output_len);
  check_positive("--iters", run.iters);
  if (run.warmup < 0) throw Error("--warmup: " + std::to_string(run.warmup) + " is negative");
}

}  // namespace fp8lm::cli
