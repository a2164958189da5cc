#include "cli/run_flags.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <utility>
#include <thread>

#include "cli/progress.h"
#include "common/error.h"
#include "engine/eagle3_drafter.h"

namespace fp8lm::cli {
namespace {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return Error(flag + ": '" + text + "' " + why + " (a size in bytes: 1073741824, 8GiB, 8G, 512MiB)");
  };
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const auto dots = std::count(text.begin(), text.begin() + long(digits), '.');
  if (digits == 0 || dots > 1 || size_t(dots) == digits) throw bad("is not a size");
  const std::string suffix = text.substr(digits);
  std::string unit = suffix;
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1.0},         {"k", 1e3},           {"K", 1e3},           {"M", 1e6},
      {"G", 1e9},        {"T", 1e12},          {"Ki", 1024.0},       {"Mi", 1048576.0},
      {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  double scale = 0.0;
  for (const auto& [name, factor] : kUnits)
    if (unit == name) scale = factor;
  if (scale == 0.0) throw bad("has an unknown unit '" + suffix + "'");
  const double value = std::stod(text.substr(0, digits)) * scale;
  if (!(value >= 1.0)) throw bad("is less than one byte");
  if (value >= 18446744073709551616.0) throw bad("is beyond 2^64 bytes");
  return uint64_t(value);
}

engine::RuntimeOptions RunFlags::options() const {
  engine::RuntimeOptions o;
  if (threads < 0) throw Error("--threads: " + std::to_string(threads) + " is negative (0 = all cores)");
  o.threads = threads == 0 ? usable_cores() : threads;
  if (kv_cache_tokens < 0) throw Error("--kv-cache-tokens: " + std::to_string(kv_cache_tokens) + " is negative");
  o.kv_cache_tokens = kv_cache_tokens;
  if (!kv_cache_memory.empty()) o.kv_cache_bytes = parse_byte_size(kv_cache_memory, "--kv-cache-memory");
  o.max_model_len = max_model_len;  // checked by the runtime (engine::resolve_max_model_len)
  o.calibrate_kv_scales = !no_kv_calibration;
  if (kernels == "auto") o.kernels = KernelChoice::kAuto;
  else if (kernels == "scalar") o.kernels = KernelChoice::kScalar;
  else if (kernels == "avx2") o.kernels = KernelChoice::kAvx2;
  else if (kernels == "avx512") o.kernels = KernelChoice::kAvx512;
  else throw Error("--cpu-kernels: '" + kernels + "' is not one of auto, scalar, avx2, avx512");
  if (device == "cpu") o.device = backend::Device::kCpu;
  else if (device == "cuda") o.device = backend::Device::kCuda;
  else throw Error("--device: '" + device + "' is not one of cpu, cuda");
  o.cuda_graphs = !no_cuda_graphs;
  if (decode_kernel == "auto") o.decode_kernel = backend::DecodeKernel::kAuto;
  else if (decode_kernel == "layered") o.decode_kernel = backend::DecodeKernel::kLayered;
  else if (decode_kernel == "persistent") o.decode_kernel = backend::DecodeKernel::kPersistent;
  else throw Error("--decode-kernel: '" + decode_kernel + "' is not one of auto, layered, persistent");
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    throw Error("--gpu-memory-utilization: " + std::to_string(gpu_memory_utilization) + " is not in (0, 1]");
  o.gpu_memory_utilization = gpu_memory_utilization;
  if (tensor_parallel_size < 1)
    throw Error("--tensor-parallel-size: " + std::to_string(tensor_parallel_size) + " is not a positive number of ranks");
  o.tensor_parallel_size = tensor_parallel_size;
  o.fp8_attention = fp8_attention;
  auto bar = std::make_shared<ProgressBar>("loading weights", "layers");
  o.load_progress = [bar](int64_t done, int64_t total) { bar->update(done, total); };
  return o;
}

std::shared_ptr<RunFlags> add_run_flags(CLI::App* cmd) {
  auto f = std::make_shared<RunFlags>();
  add_threads_flag(cmd, *f);
  cmd->add_option("--kv-cache-tokens", f->kv_cache_tokens,
                  "KV cache capacity in tokens (0 = from the memory there is: on the CPU at most half of the host "
                  "memory available and no more than the sequences can use, on a GPU what "
                  "--gpu-memory-utilization leaves)");
  cmd->add_option("--kv-cache-memory", f->kv_cache_memory,
                  "KV cache capacity in bytes instead of tokens: 8GiB, 8G (10^9), 512MiB, 1073741824");
  cmd->add_option("--device", f->device, "Where the model runs: cpu (default) or cuda (a Hopper GPU)");
  cmd->add_flag("--no-cuda-graphs", f->no_cuda_graphs, "CUDA: launch every kernel of decode steps (no graphs)");
  cmd->add_option("--decode-kernel", f->decode_kernel,
                  "CUDA: how a dense model's decode steps run: auto (the persistent kernel at the batch sizes where "
                  "it measured faster), layered (one kernel per op), persistent (one kernel per step wherever it "
                  "runs the step)");
  cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "CUDA: share of the GPU's memory fp8lm may fill, the KV cache taking what is left (default 0.9)");
  cmd->add_option("--tensor-parallel-size,--tp", f->tensor_parallel_size,
                  "Split the model over this many ranks (tensor parallelism): GPUs 0..N-1 with --device cuda "
                  "(NCCL), threads of this process on the CPU (--threads shared between them); default 1");
  cmd->add_option("--cpu-kernels", f->kernels, "CPU vector loops: auto, scalar, avx2, avx512");
  cmd->add_flag("--fp8-attention", f->fp8_attention,
                "Attention's products in FP8 (E4M3 queries, keys, values and softmax weights, float32 sums: "
                "FlashAttention-3's FP8 attention) over an FP8 E4M3 KV cache (--kv-cache-dtype fp8); the CPU "
                "backend only so far, as the numerics reference (issue 44)");
  cmd->add_flag("--no-kv-calibration", f->no_kv_calibration,
                "With an FP8 KV cache and no k/v scales in the checkpoint: use 1.0 instead of calibrating them at "
                "load on the built-in text");
  return f;
}

void add_threads_flag(CLI::App* cmd, RunFlags& flags, const std::string& purpose) {
  cmd->add_option("--threads", flags.threads, "CPU threads" + purpose + " (0 = all usable cores)");
}

void add_max_model_len_flag(CLI::App* cmd, RunFlags& flags) {
  cmd->add_option("--max-model-len", flags.max_model_len,
                  "Context per sequence, prompt + generated tokens (default and maximum: the model's "
                  "max_position_embeddings, lowered to what a KV cache sized from memory holds)");
}

int64_t max_model_len_for(const RunFlags& flags, int64_t context) {
  return engine::resolve_max_model_len(flags.max_model_len, context);
}

void add_scheduler_flags(CLI::App* cmd, SchedulerFlags& flags, const std::string& hits_reported) {
  cmd->add_option("--max-num-seqs", flags.max_num_seqs, "Most sequences running at once (default 256)");
  cmd->add_flag("--enable-prefix-caching", flags.enable_prefix_caching,
                "Keep the KV of full blocks after requests finish and share it with later requests that start "
                "with the same tokens (" + hits_reported + ")");
  cmd->add_flag("--async-scheduling,!--no-async-scheduling", flags.async_scheduling,
                "Schedule step N+1 and handle step N's output while the device runs step N (default on)");
}

std::shared_ptr<SamplingFlags> add_sampling_flags(CLI::App* cmd) {
  auto f = std::make_shared<SamplingFlags>();
  f->base.max_tokens = 256;
  f->base.temperature = 0.0f;
  engine::SamplingParams& p = f->base;
  cmd->add_option("--max-tokens", p.max_tokens, "Most tokens to generate (capped by the context)");
  SamplingFlags::Defaulted& d = f->defaulted;
  d.temperature = cmd->add_option("--temperature", p.temperature,
                                  "Sampling temperature (0 = greedy; default: the model's generation config, else 0)");
  d.top_k = cmd->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0 = off)");
  d.top_p = cmd->add_option("--top-p", p.top_p, "Nucleus sampling mass in (0, 1] (1 = off)");
  d.min_p = cmd->add_option("--min-p", p.min_p, "Drop tokens below min-p × the top probability (0 = off)");
  d.repetition_penalty =
      cmd->add_option("--repetition-penalty", p.repetition_penalty, "Penalty on prompt and output tokens (1 = off)");
  cmd->add_option("--presence-penalty", p.presence_penalty, "OpenAI presence penalty (0 = off)");
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "OpenAI frequency penalty (0 = off)");
  f->seed_option = cmd->add_option("--seed", f->seed, "Random seed (same seed, same tokens)");
  cmd->add_option("--stop", p.stop, "Stop string (repeatable); not included in the output");
  cmd->add_option("--stop-token-id", p.stop_token_ids, "Token id that ends generation (repeatable)");
  cmd->add_flag("--ignore-eos", p.ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->add_option("--generation-config", f->generation_config,
                  "Default sampling parameters: auto (the model's generation_config.json, the default), fp8lm "
                  "(greedy), or a directory holding a generation_config.json; flags override them");
  return f;
}

io::GenerationDefaults generation_defaults(const std::string& choice, const std::filesystem::path& model_dir) {
  if (choice == "fp8lm") return {};
  if (choice == "auto") return io::read_generation_config(model_dir);
  if (!std::filesystem::is_directory(choice))
    throw Error("--generation-config: '" + choice + "' is not auto, fp8lm or a directory");
  io::GenerationDefaults g = io::read_generation_config(choice);
  if (g.empty()) throw Error("--generation-config: " + choice + " holds no generation_config.json");
  return g;
}

std::string generation_defaults_note(const io::GenerationDefaults& g, const engine::SamplingParams& fp8lm_defaults) {
  if (!g.empty()) return "sampling defaults from " + g.source.string() + ": " + g.describe();
  return std::string("sampling defaults: fp8lm's (") +
         (fp8lm_defaults.greedy() ? "greedy" : "temperature " + std::to_string(fp8lm_defaults.temperature)) + ")";
}

void add_model_eos(engine::SamplingParams& p, const engine::Runtime& rt, const std::filesystem::path& model_dir) {
  std::string warning;
  engine::add_eos_stops(p, engine::further_eos_ids(model_dir, rt.eos_ids(), warning));
  if (!warning.empty()) std::fprintf(stderr, "fp8lm: warning: %s\n", warning.c_str());
}

engine::SamplingParams SamplingFlags::params(const std::filesystem::path& model_dir, std::string* note) const {
  const io::GenerationDefaults g = generation_defaults(generation_config, model_dir);
  engine::SamplingParams defaults;
  defaults.temperature = 0.0f;  // fp8lm's own default: greedy
  defaults = engine::with_generation_defaults(defaults, g);
  // Each flag given replaces its default; the others keep it.
  engine::SamplingParams p = base;
  const std::pair<float engine::SamplingParams::*, CLI::Option*> floats[] = {
      {&engine::SamplingParams::temperature, defaulted.temperature},
      {&engine::SamplingParams::top_p, defaulted.top_p},
      {&engine::SamplingParams::min_p, defaulted.min_p},
      {&engine::SamplingParams::repetition_penalty, defaulted.repetition_penalty}};
  for (const auto& [field, option] : floats)
    if (option->count() == 0) p.*field = defaults.*field;
  if (defaulted.top_k->count() == 0) p.top_k = defaults.top_k;
  if (seed_option != nullptr && seed_option->count() > 0) p.seed = seed;
  p.validate();
  if (note != nullptr) {
    *note = generation_defaults_note(g, defaults);
    if (!g.empty() && !p.greedy()) *note += " (--temperature 0 or --generation-config fp8lm for greedy)";
  }
  return p;
}

void print_load_summary(const engine::Runtime& rt, const RunFlags& flags) {
  (void)flags;
  const ModelConfig& c = rt.config();
  // "FP8 fp8-e4m3 w:channel a:dynamic-token (70 of 71 linear layers)" or "BF16".
  size_t quantized = 0;
  std::string scheme;
  for (const io::LinearLayerSpec& l : rt.spec().linears)
    if (l.scheme.quantized) {
      if (quantized++ == 0) scheme = l.scheme.describe();
    }
  const bool fp8_embeddings = rt.spec().quantization.fp8_embeddings;
  const size_t linears = rt.spec().linears.size() + (c.tie_word_embeddings ? 1 : 0);
  if (fp8_embeddings) ++quantized;  // lm_head (the spec never quantizes it)
  std::string weights = quantized == 0 ? std::string(name(c.dtype))
                                       : "FP8 " + scheme + " (" + std::to_string(quantized) + " of " +
                                             std::to_string(linears) + " linear layers)";
  if (fp8_embeddings) weights += ", FP8 embeddings";
  const KvCacheDType kv = rt.spec().kv_cache().dtype == KvCacheDType::kAuto ? KvCacheDType::kBF16
                                                                            : rt.spec().kv_cache().dtype;
  std::fprintf(stderr, "fp8lm: %s, %d layers, weights %s, %.1f MiB; KV cache %s, %.1f MiB; %s\n",
               c.architecture.c_str(), c.num_hidden_layers, weights.c_str(), double(rt.weight_bytes()) / (1 << 20),
               std::string(name(kv)).c_str(), double(rt.kv_cache_bytes()) / (1 << 20), rt.backend_name().c_str());
  for (const std::string& n : rt.notes()) std::fprintf(stderr, "fp8lm: note: %s\n", n.c_str());
  if (is_fp8(kv)) {  // the scales in use, wherever they came from
    std::string ks, vs;
    for (const backend::KvLayerFormat& f : rt.kv_formats()) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%s%.4g", ks.empty() ? "" : " ", double(f.k_scale));
      ks += buf;
      std::snprintf(buf, sizeof buf, "%s%.4g", vs.empty() ? "" : " ", double(f.v_scale));
      vs += buf;
    }
    std::fprintf(stderr, "fp8lm: KV scales per layer: k [%s], v [%s]\n", ks.c_str(), vs.c_str());
  }
}

void add_speculative_config_flag(CLI::App* cmd, std::string& json) {
  cmd->add_option("--speculative-config", json,
                  "Speculative decoding, vLLM's JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": k, "
                  "\"prompt_lookup_min\": a, \"prompt_lookup_max\": b, \"disable_by_batch_size\": n}, or a draft model "
                  "with the target's tokenizer: {\"model\": DIR, \"num_speculative_tokens\": k, \"quantization\": "
                  "\"fp8\"}, or an EAGLE-3 head (speculators' layout or the EAGLE release's): {\"method\": "
                  "\"eagle3\", \"model\": DIR, \"num_speculative_tokens\": k} (lossless: greedy tokens unchanged, "
                  "sampled ones distributed as without it)");
}

std::optional<engine::SpeculativeConfig> speculative_config(const std::string& json) {
  if (json.empty()) return std::nullopt;
  return engine::parse_speculative_config(json);
}

namespace {
// The draft model of `spec` (none for the n-gram drafter or no config): load_target_and_draft.
std::unique_ptr<engine::DraftModel> load_draft_model(const std::optional<engine::SpeculativeConfig>& spec,
                                                     const engine::RuntimeOptions& target) {
  if (!spec || spec->method != engine::SpeculativeConfig::Method::kDraftModel) return nullptr;
  engine::RuntimeOptions o = target;
  o.load_progress = nullptr;
  o.kv_cache_bytes = 0;
  o.kv_cache_tokens = 0;
  o.k_scales.clear();
  o.v_scales.clear();
  if (o.device != backend::Device::kCpu) o.kv_cache_tokens = std::max<int64_t>(o.max_num_seqs, 1) * 4096;
  std::fprintf(stderr, "fp8lm: loading the draft model %s\n", spec->model.c_str());
  return engine::DraftModel::load(*spec, o);
}

}  // namespace

LoadedModels load_target_and_draft(const std::filesystem::path& model, const io::LoadOverrides& overrides,
                                   const engine::RuntimeOptions& options,
                                   const std::optional<engine::SpeculativeConfig>& spec) {
  LoadedModels out;
  std::unique_ptr<engine::DraftModel> draft = load_draft_model(spec, options);
  engine::RuntimeOptions target = options;
  if (spec && spec->method == engine::SpeculativeConfig::Method::kEagle3)
    target.kv_companion_bytes_per_token = engine::Eagle3Drafter::kv_bytes_per_token(*spec);
  out.runtime = engine::Runtime::load(model, overrides, target);
  if (draft) draft->check_target(out.runtime->config().vocab_size);
  out.draft = std::move(draft);
  if (spec && spec->method == engine::SpeculativeConfig::Method::kEagle3) {
    std::fprintf(stderr, "fp8lm: loading the EAGLE-3 head %s\n", spec->model.c_str());
    out.draft = engine::Eagle3Drafter::load(*spec, *out.runtime, options.max_num_seqs, options.max_num_batched_tokens);
  }
  return out;
}

nlohmann::json speculative_json(const engine::SpeculativeStats& st) {
  std::vector<double> per_position;
  for (size_t i = 0; i < st.reached.size(); ++i)
    per_position.push_back(st.reached[i] > 0 ? double(st.accepted_at[i]) / double(st.reached[i]) : 0.0);
  return {{"verify_steps", st.steps},
          {"drafted_tokens", st.drafted},
          {"accepted_tokens", st.accepted},
          {"acceptance_rate", st.acceptance_rate()},
          {"mean_accepted_length", st.mean_accepted_length()},
          {"acceptance_by_position", per_position}};
}

}  // namespace fp8lm::cli
