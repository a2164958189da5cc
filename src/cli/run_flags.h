// The flags of commands that run a model (generate, chat; later eval, bench,
// serve): threads and KV-cache size, and the sampling parameters of a request.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime.h"
#include "engine/sampler.h"

namespace fp8lm::cli {

struct RunFlags {
  int threads = 0;              // 0 = every core this process may use
  int64_t kv_cache_tokens = 0;  // 0 = one full context
  std::string kv_cache_memory;  // bytes, "8GiB" style suffixes allowed; empty = not given
  std::string kernels = "auto";
  bool no_kv_calibration = false;
  std::string device = "cpu";
  bool no_cuda_graphs = false;
  double gpu_memory_utilization = 0.9;

  // Throws fp8lm::Error for a value out of range.
  engine::RuntimeOptions options() const;
};
std::shared_ptr<RunFlags> add_run_flags(CLI::App* cmd);

// "123", "8G", "8GiB", "512M", "1.5G": bytes. k/M/G/T are powers of 1000,
// Ki/Mi/Gi/Ti powers of 1024, a trailing "B" is allowed. Throws fp8lm::Error
// naming `flag` for anything else, zero or a value beyond 2^64.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

struct SamplingFlags {
  engine::SamplingParams base;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  // The parameters as given; throws fp8lm::Error naming a bad one.
  engine::SamplingParams params() const;
};
// Defaults: --max-tokens 256, --temperature 0 (greedy) unless given.
std::shared_ptr<SamplingFlags> add_sampling_flags(CLI::App* cmd);

// Prints the runtime's notes and what was loaded, to stderr.
void print_load_summary(const engine::Runtime& rt, const RunFlags& flags);

}  // namespace fp8lm::cli
