// The latency measurement of `bench latency`, shared with `bench sweep`: one
// batch of prompts prefilled (TTFT) and decoded (TPOT) on a loaded runtime,
// warm-up and timed iterations, medians, and the flags that set them. Nothing
// here prints; the commands format what it returns.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/runtime.h"

namespace fp8lm::cli {

// One iteration's numbers (seconds; tok/s).
struct IterationResult {
  int64_t prefill_calls = 0;  // forward calls of the prefill
  double ttft = 0.0;
  double prefill_tok_s = 0.0;
  std::vector<double> steps;  // every decode step's time
  double tpot_mean = 0.0;
  double tpot_median = 0.0;
  double decode_tok_s = 0.0;
  double total = 0.0;
  double cpu = 0.0;     // this process's CPU time, every thread
  double others = 0.0;  // CPU time other processes used meanwhile (machine noise), from /proc/stat
};

// One prefill + (O − 1) decode steps for the whole batch; blocks are freed on
// every exit. The prompts go in forward calls of at most `max_batched_tokens`
// rows (whole prompts, at least one per call). `after_prefill` (the profile's)
// runs between the two, untimed. Throws fp8lm::Error when the KV cache cannot
// hold the batch.
// `verify_tokens` > 1: every decode step feeds each sequence that many tokens (the last one and
// verify_tokens − 1 more, as a speculative verify step of k = verify_tokens − 1 drafted tokens
// that all fail, issue 42) with every position's logits; the next step starts one position on
// and overwrites the rest. The cache holds verify_tokens − 1 positions more a sequence.
IterationResult run_iteration(engine::Runtime& rt, const std::vector<std::vector<int32_t>>& prompts,
                              int64_t output_len, int64_t max_batched_tokens,
                              const std::function<void()>& after_prefill = {}, int64_t verify_tokens = 1);

// Medians over the timed iterations, and the iterations themselves.
struct LatencySummary {
  std::vector<IterationResult> iterations;
  double ttft = 0.0, prefill_tok_s = 0.0;
  double tpot_mean = 0.0, tpot_median = 0.0, decode_tok_s = 0.0;  // 0 when output_len is 1
  double total = 0.0, cpu = 0.0;
  double others_share = 0.0;  // the machine's CPU other processes took meanwhile
};

struct LatencyRun {
  int64_t output_len = 128;
  int64_t max_batched_tokens = 16384;
  int64_t warmup = 1;
  int64_t iters = 3;
  int64_t verify_tokens = 1;  // tokens a sequence feeds a decode step (bench latency --verify-tokens)
};

// The lengths (add_length_flags), --warmup, --iters and --max-num-batched-tokens into `run`;
// `each` qualifies the iterations (", per batch size"). check_latency_flags() refuses the
// lengths and --iters below 1, --warmup below 0, naming the flag.
void add_latency_flags(CLI::App* cmd, int64_t& input_len, LatencyRun& run, const std::string& each = "");
void check_latency_flags(int64_t input_len, const LatencyRun& run);

// `warmup` untimed then `iters` timed iterations; `progress(done, total, last)`
// after each (`last`: the iteration's seconds, timed ones only, else < 0).
LatencySummary measure_latency(engine::Runtime& rt, const std::vector<std::vector<int32_t>>& prompts,
                               const LatencyRun& run,
                               const std::function<void(int64_t done, int64_t total, double last_s)>& progress = {});

// The checks and the runtime options of a latency measurement of up to
// `max_batch` sequences of input_len + output_len tokens in a context of
// `context` positions (--max-model-len, else the model's), before anything
// loads: the lengths against the context,
// --kv-cache-tokens against what the batch needs (on the CPU the cache is sized
// for it when not given), the step sizes. Throws fp8lm::Error naming the flag.
void prepare_latency_options(engine::RuntimeOptions& options, int64_t context, int64_t max_batch, int64_t input_len,
                             int64_t output_len, int64_t max_batched_tokens);

double median(std::vector<double> v);

}  // namespace fp8lm::cli
