// What the benchmarks (bench latency, throughput, sweep, serve) share: the flags they
// have in common, the synthetic prompts they draw, how they describe the weights and
// the machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/model_flags.h"
#include "cli/run_flags.h"
#include "engine/runtime.h"

namespace fp8lm::cli {

// --input-len and --output-len (default 128 each), the synthetic prompts' tokens and the tokens
// generated for each, per `each` ("sequence", "request"); check_lengths() refuses either below 1.
void add_length_flags(CLI::App* cmd, int64_t& input_len, int64_t& output_len, const std::string& each);
void check_lengths(int64_t input_len, int64_t output_len);
// --json FILE: "Also write <what> and the configuration to this JSON file".
void add_json_file_flag(CLI::App* cmd, std::string& file, const std::string& what = "every number");
// A benchmark's results as --json writes them: indented, written atomically (a temporary file
// renamed over `path`, so a reader never sees half of it).
void write_json_file(const std::string& path, const nlohmann::json& results);

// `batch` deterministic prompts of `input_len` ids drawn uniformly from the
// vocabulary (fixed seed: the same prompts every run), never a special token or
// an end-of-sequence id; a model without a tokenizer draws from the whole vocabulary.
std::vector<std::vector<int32_t>> synthetic_prompts(const engine::Runtime& rt, int64_t batch, int64_t input_len);
// "BF16" or "FP8 <scheme> (n of m linear layers)".
std::string weight_description(const engine::Runtime& rt);
// K + V bytes the cache holds per token position, over all layers (what a decode
// step reads per position of each sequence's context).
uint64_t kv_cache_bytes_per_token(engine::Runtime& rt);
// The embedding table as the rooflines count it (common/decode_weight_bytes.h): {"bytes", "rows",
// "tied"}, written beside weight_bytes so that bench report applies the same rule.
nlohmann::json embedding_json(const EmbeddingTable& e);
// "4.29T", "4.29TB/s", "800G", "4.29e12" → bytes per second; anything else refused naming `flag`.
double parse_bandwidth(const std::string& text, const char* flag);
// The model directory's name: "models/m/" → "m".
std::string model_dir_name(const std::string& model);
// How both benchmarks name a run: in their header line and in their JSON "config".
struct RunDescription {
  std::string model_name;      // the model directory's name
  std::string weights;         // weight_description()
  std::string kv_cache_dtype;  // the cache's element type ("bf16" for auto)
  nlohmann::json shared;       // the config fields every benchmark writes
  // `shared` plus the benchmark's own fields.
  nlohmann::json config(nlohmann::json own) const {
    nlohmann::json c = shared;
    c.update(own);
    return c;
  }
};
RunDescription describe_run(const ModelFlags& mf, const RunFlags& rf, const engine::RuntimeOptions& options,
                            const engine::Runtime& rt);

int online_cpus();           // processors online (at least 1)
std::string cpu_model();      // /proc/cpuinfo's model name
std::string load_average();   // /proc/loadavg's first three fields
std::string utc_now();        // ISO 8601
double process_cpu_seconds();  // this process, every thread
// Throws fp8lm::Error "FLAG: v must be at least 1" for v ≤ 0.
void check_positive(const char* flag, int64_t v);

}  // namespace fp8lm::cli
