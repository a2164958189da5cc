// The flags of commands that run a model (generate, chat, eval, bench, serve): threads and
// KV-cache size, the batched engine's scheduler, and the sampling parameters of a request.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/draft_model.h"
#include "engine/runtime.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "io/generation_config.h"

namespace fp8lm::cli {

struct RunFlags {
  int threads = 0;              // 0 = every core this process may use
  int64_t kv_cache_tokens = 0;  // 0 = sized from the memory there is
  std::string kv_cache_memory;  // bytes, "8GiB" style suffixes allowed; empty = not given
  int64_t max_model_len = 0;    // --max-model-len where add_max_model_len_flag added it; 0 = the model's context
  std::string kernels = "auto";
  bool no_kv_calibration = false;
  std::string device = "cpu";
  bool no_cuda_graphs = false;
  std::string decode_kernel = "auto";
  double gpu_memory_utilization = 0.9;
  int tensor_parallel_size = 1;
  bool fp8_attention = false;

  // Throws fp8lm::Error for a value out of range.
  engine::RuntimeOptions options() const;
};
std::shared_ptr<RunFlags> add_run_flags(CLI::App* cmd);
// --threads alone (add_run_flags adds it too), for a command that runs no model on ranks or
// devices; `purpose` goes into its help: " for calibration".
void add_threads_flag(CLI::App* cmd, RunFlags& flags, const std::string& purpose = "");
// --max-model-len (vLLM's): the longest sequence, prompt + generated tokens, a run admits. For
// generate, chat, bench, eval and serve.
void add_max_model_len_flag(CLI::App* cmd, RunFlags& flags);
// The run's max_model_len before anything loads, against the model's context (`context`): the
// flag, or the context. Throws fp8lm::Error naming --max-model-len when it is beyond it.
int64_t max_model_len_for(const RunFlags& flags, int64_t context);

// The batched engine's flags that serve and bench throughput share (vLLM's names and defaults);
// each adds its own --max-num-batched-tokens, whose defaults differ.
struct SchedulerFlags {
  int64_t max_num_seqs = engine::SchedulerConfig{}.max_num_seqs;
  bool enable_prefix_caching = false;
  bool async_scheduling = engine::SchedulerConfig{}.async_scheduling;
};
// `hits_reported`: where the command reports the prefix cache's hits, for --enable-prefix-caching's help.
void add_scheduler_flags(CLI::App* cmd, SchedulerFlags& flags, const std::string& hits_reported);

// "123", "8G", "8GiB", "512M", "1.5G": bytes. k/M/G/T are powers of 1000,
// Ki/Mi/Gi/Ti powers of 1024, a trailing "B" is allowed. Throws fp8lm::Error
// naming `flag` for anything else, zero or a value beyond 2^64.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

// --speculative-config JSON (vLLM's; engine/speculative.h) on the commands that speculate.
void add_speculative_config_flag(CLI::App* cmd, std::string& json);
// The parsed config, or none for an empty flag; throws fp8lm::Error naming what is wrong.
std::optional<engine::SpeculativeConfig> speculative_config(const std::string& json);
// The target model and the drafter its speculative config loads: a draft model, checked against
// the target (DraftModel::check_target), loads first, on the target's device with its threads, so
// that on a GPU the target's KV cache takes what the draft left (a draft KV cache given no size
// holds `options.max_num_seqs` sequences of 4,096 tokens on a GPU, of its context on the CPU); an
// EAGLE-3 head loads after the target, whose backend and embedding it shares
// (engine/eagle3_drafter.h).
struct LoadedModels {
  std::unique_ptr<engine::Drafter> draft;  // none for the n-gram drafter or no config
  std::unique_ptr<engine::Runtime> runtime;
};
LoadedModels load_target_and_draft(const std::filesystem::path& model, const io::LoadOverrides& overrides,
                                   const engine::RuntimeOptions& options,
                                   const std::optional<engine::SpeculativeConfig>& spec);

// A run's acceptance counts as the JSON outputs report them (generate, bench throughput).
nlohmann::json speculative_json(const engine::SpeculativeStats& st);

struct SamplingFlags {
  engine::SamplingParams base;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
  std::string generation_config = "auto";
  // The options a generation config gives defaults for (given on the command line or not).
  struct Defaulted {
    CLI::Option *temperature = nullptr, *top_k = nullptr, *top_p = nullptr, *min_p = nullptr,
                *repetition_penalty = nullptr;
  } defaulted;
  // The parameters: the flags given, over the defaults of --generation-config for the model
  // in `model_dir`; `note` (when not null) says where the defaults came from. Throws
  // fp8lm::Error naming a bad flag or a bad field of the generation config.
  engine::SamplingParams params(const std::filesystem::path& model_dir, std::string* note = nullptr) const;
};
// Defaults: --max-tokens 256; the sampling fields of the model's generation_config.json
// (--generation-config auto), else greedy (--generation-config fp8lm).
std::shared_ptr<SamplingFlags> add_sampling_flags(CLI::App* cmd);

// --generation-config: "auto" (the model's generation_config.json, none when it has none),
// "fp8lm" (none: fp8lm's own defaults) or a directory holding a generation_config.json.
// Throws fp8lm::Error naming the flag for anything else.
io::GenerationDefaults generation_defaults(const std::string& choice, const std::filesystem::path& model_dir);
// generation_config.json's EOS ids beyond the runtime's as stop tokens of `p` (unless
// ignore_eos), as the server does; a generation config that cannot be read adds none.
void add_model_eos(engine::SamplingParams& p, const engine::Runtime& rt, const std::filesystem::path& model_dir);
// "sampling defaults: <file> (temperature 0.8, …)" or "sampling defaults: fp8lm's (…)".
std::string generation_defaults_note(const io::GenerationDefaults& g, const engine::SamplingParams& fp8lm_defaults);

// Prints the runtime's notes and what was loaded, to stderr.
void print_load_summary(const engine::Runtime& rt, const RunFlags& flags);

}  // namespace fp8lm::cli
