// `fp8lm bench report` and the report `bench sweep` writes: benchmark results
// read from their JSON files, merged, and drawn as one self-contained HTML page
// (inline CSS and SVG from cli/svg_chart, no script, no external URL) — decode
// and prefill tokens/s against the batch size with the decode roofline drawn
// in, each configuration against the baseline (BF16) with the ratio on every
// bar, and for serving results output tokens/s and TTFT / TPOT percentiles by
// concurrency.
//
// What it reads, told apart by the file's "benchmark" field:
//   "sweep"   (bench sweep; schema below) — several configurations × batch sizes;
//   "latency" (bench latency --json) — one configuration at one batch size;
//   "serve"   (bench serve --json) — one server configuration at one concurrency.
// A configuration's name comes from a LABEL=FILE argument, else the file's
// "config.label", else — latency — its flags ("bf16", "fp8", "fp8:block+kv";
// config_name()) or — serve — the served model's name. Points of one
// configuration may come from several files; the same (configuration, batch
// size) or (configuration, concurrency) twice is an error naming both files, as
// are latency results of different input/output lengths.
//
// The sweep JSON (schema 1):
//   {"benchmark": "sweep", "schema": 1,
//    "config": {"model", "model_path", "device", "load_format", "configs": [names], "batch_sizes": [B…],
//               "input_len", "output_len", "warmup", "iters", "max_num_batched_tokens", "baseline",
//               "cpu", "online_cpus", "date", "version"},
//    "roofline": {"bandwidth_bytes_per_s": number or null, "bandwidth_source": text,
//                 "decode_context_tokens": input_len + output_len / 2, "formula": text},
//    "runs": [{"name": "fp8+kv", "quantization": "fp8" or null, "kv_cache_dtype_flag": "fp8" or null,
//              "config": {bench latency's shared config fields: model, weights, kv_cache_dtype, backend,
//                         device, threads, …},
//              "load_s", "weight_bytes", "kv_cache_bytes_per_token", "kv_cache_tokens",
//              "points": [{"batch_size", "ttft_s", "prefill_tok_s", "tpot_median_s", "tpot_mean_s",
//                          "decode_tok_s", "iteration_s", "iteration_cpu_s", "other_processes_cpu_share",
//                          "roofline_decode_tok_s", "roofline_share",
//                          "per_iteration": {"ttft_s": […], "tpot_median_s": […], "decode_tok_s": […]}}]}]}
// decode values are null when output_len is 1; the roofline's when no bandwidth is known.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/decode_weight_bytes.h"

namespace fp8lm::cli::report {

// The decode step's memory-bandwidth bound in tokens/s: each step reads every
// weight once and each sequence's KV cache up to `context` tokens, so
// tok/s ≤ batch × bandwidth / (weight_bytes + batch × context × kv_bytes_per_token).
double decode_roofline_tok_s(double batch, double weight_bytes, double kv_bytes_per_token, double context,
                             double bandwidth);
// The mean context of the decode steps of a benchmark (input_len + output_len / 2):
// step s of 1 … O − 1 attends to I + s positions.
double decode_context_tokens(int64_t input_len, int64_t output_len);
// numpy.percentile's default (linear interpolation), q in [0, 100]; values need not be sorted.
double percentile(std::vector<double> values, double q);

// A configuration as the sweep's --configs names it: "bf16" (the checkpoint as it is),
// a --quantization value ("fp8", "fp8:block", …), then optionally "+kv" (an FP8 E4M3
// KV cache) or "+kv=DTYPE" (any --kv-cache-dtype value).
struct ConfigSpec {
  std::string name;
  std::string quantization;    // empty: none
  std::string kv_cache_dtype;  // empty: the checkpoint's choice
};
// Throws fp8lm::Error naming `flag` and the configuration for a malformed one
// (the values themselves are checked when the model loads).
ConfigSpec parse_config(const std::string& text, const std::string& flag);
// The name of a run with these flags (null / empty: not given): the inverse of parse_config.
std::string config_name(const std::string& quantization, const std::string& kv_cache_dtype_flag,
                        const std::string& weights);

struct LatencyPoint {
  int64_t batch_size = 0;
  double ttft_s = 0.0;
  double prefill_tok_s = 0.0;
  std::optional<double> tpot_median_s;
  std::optional<double> decode_tok_s;
  std::string source;  // the file it came from
};

// One configuration's latency results.
struct ConfigRun {
  std::string name;
  std::string weights;         // "BF16", "FP8 fp8-e4m3 w:channel … (224 of 225 linear layers)"
  std::string kv_cache_dtype;  // "bf16", "fp8_e4m3"
  std::string backend;         // "cpu (avx2, 2 threads)", "cuda:0 (NVIDIA H200)"
  std::optional<double> weight_bytes;
  std::optional<double> kv_bytes_per_token;
  // An MoE model's experts (the sweep's "moe" object): the roofline reads only the experts a
  // step routes to (common/decode_weight_bytes.h).
  using Moe = RoutedExperts;
  std::optional<Moe> moe;
  // The embedding table ("embedding" beside weight_bytes): a step reads its tokens' rows. Files
  // written before it was recorded count the whole table, as those versions did.
  std::optional<EmbeddingTable> embedding;
  std::vector<LatencyPoint> points;  // by batch size
};

struct Percentiles {
  std::optional<double> p50, p90, p99;  // milliseconds
};

// One server configuration at one concurrency (bench serve).
struct ServePoint {
  std::string config;
  int64_t concurrency = 0;  // --max-concurrency, or the prompts when unlimited
  bool unlimited = false;
  int64_t completed = 0, failed = 0;
  double output_tok_s = 0.0;
  double requests_per_s = 0.0;
  std::string request_rate;  // "inf" or requests/s
  Percentiles ttft_ms, tpot_ms;
  std::string source;
};

struct Lengths {
  int64_t input_len = 0, output_len = 0;
  std::string source;
};

struct ReportData {
  std::string title;  // empty: "fp8lm bench report: <models>"
  // Distinct values, in the order read: what the page says the results are of.
  std::vector<std::string> models, backends, versions, dates;
  std::vector<std::string> iterations;  // latency: "1 warm-up + 3 timed iterations"
  std::vector<std::string> sources;  // the files' names
  bool any_cuda = false;             // some results are from a CUDA device
  std::optional<Lengths> latency_lengths, serve_lengths;
  std::optional<double> bandwidth;  // bytes/s of the decode roofline; none: no roofline
  std::string bandwidth_source;
  std::string baseline;  // the configuration others are compared with; empty: "bf16" if any, else the first
  std::vector<ConfigRun> runs;
  std::vector<ServePoint> serve;
};

// "LABEL=PATH" (when the argument is not itself an existing file) or "PATH".
struct Input {
  std::string label;
  std::string path;
};
Input parse_input(const std::string& argument);

// Adds one results file's contents. Throws fp8lm::Error naming `name` (the
// file) and the field for anything missing, mistyped or conflicting.
void add_results(ReportData& data, const nlohmann::json& results, const std::string& name,
                 const std::string& label = "");
// Reads and adds every file (JSON errors name the file), then checks there is
// something to draw. `bandwidth` (bytes/s) overrides the files' roofline
// bandwidth; without either, results from a CUDA device use the H200's
// measured copy bandwidth and CPU results get no roofline.
ReportData read_results(const std::vector<Input>& inputs, std::optional<double> bandwidth = std::nullopt,
                        const std::string& baseline = "");

struct Chart {
  std::string id;  // "decode-throughput", …: the section's anchor and --svg-dir's file name
  std::string title;
  std::string caption;
  std::string svg;
};
// The charts the data has points for, in page order. Throws fp8lm::Error for an
// unknown baseline.
std::vector<Chart> render_charts(const ReportData& data);
// The whole page: title, details, every chart with its caption, the tables of numbers.
std::string render_html(const ReportData& data);

}  // namespace fp8lm::cli::report
