// `fp8lm bench sweep MODEL --configs "bf16 fp8 fp8+kv" --batch-sizes 1,8,32
// --out-dir DIR`: bench latency's measurement (cli/bench_latency) over
// configurations × batch sizes — each configuration loaded once, then every
// batch size measured on it, smallest first — written as one JSON
// (DIR/sweep.json, its schema in cli/bench_report.h, rewritten after each
// configuration so a failure later keeps what was measured) and drawn as one
// self-contained HTML page (DIR/report.html).
//
// `fp8lm bench report FILE... --out report.html`: the same page from saved
// results — sweeps, bench latency --json files and bench serve --json files,
// merged — so results measured elsewhere (the H200) are drawn here.
//
// Why the sweep does not run the serving benchmark itself: bench serve measures
// a server as its clients see it, over HTTP, from another process (vLLM's
// benchmark_serving does the same). A sweep over serving configurations needs a
// server process per configuration — started with its flags, waited for until
// healthy, stopped and its GPU memory given back before the next one loads —
// which is process supervision, not measurement; scripts/gpu_serve.sh does it
// (and passes each run's configuration to bench serve's --label). Running the
// server inside the sweep's process instead would share its CPU and GPU with the
// client and with the sweep's own loaded model, and measure a setup nobody
// deploys. So serving results come to the report as bench serve's JSON files.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_ceilings.h"
#include "cli/bench_common.h"
#include "cli/bench_latency.h"
#include "cli/bench_report.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/runtime.h"
#include "io/atomic_file.h"
#include "io/model_spec.h"

namespace fp8lm::cli {
namespace {

using Json = nlohmann::json;

// Each batch size's measurement parameters (output_len, warmup, iters, max_batched_tokens) and the sweep's own.
struct SweepFlags : LatencyRun {
  std::string configs = "bf16 fp8 fp8+kv";
  std::string batch_sizes = "1,8,32,64,128,256";
  int64_t input_len = 128;
  std::string roofline_bandwidth;
  std::string baseline;
  std::string out_dir;
};

struct ReportFlags {
  std::vector<std::string> inputs;
  std::string out;
  std::string roofline_bandwidth;
  std::string baseline;
  std::string title;
  std::string svg_dir;
};

// "1,8, 32" or "bf16 fp8": the items, split at commas and white space.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (const char c : text + " ") {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  return out;
}

std::vector<int64_t> parse_batch_sizes(const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    int64_t v = 0;
    size_t used = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || used == 0)
      throw Error("--batch-sizes: '" + item + "' is not a whole number (give them as 1,8,32)");
    if (v < 1) throw Error("--batch-sizes: " + item + " must be at least 1");
    if (std::find(out.begin(), out.end(), v) != out.end()) throw Error("--batch-sizes: " + item + " is given twice");
    out.push_back(v);
  }
  if (out.empty()) throw Error("--batch-sizes: no batch size given (give them as 1,8,32)");
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<report::ConfigSpec> parse_configs(const std::string& text) {
  std::vector<report::ConfigSpec> out;
  for (const std::string& item : split_list(text)) {
    report::ConfigSpec c = report::parse_config(item, "--configs");
    for (const report::ConfigSpec& o : out)
      if (o.name == c.name) throw Error("--configs: '" + c.name + "' is given twice");
    out.push_back(std::move(c));
  }
  if (out.empty()) throw Error("--configs: no configuration given (e.g. --configs \"bf16 fp8 fp8+kv\")");
  return out;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  io::AtomicFile file(path);
  file.write(std::as_bytes(std::span(text.data(), text.size())));
  file.finish();
  file.commit();
}

void make_directory(const std::string& dir, const char* flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw Error(std::string(flag) + ": cannot create the directory " + dir + (ec ? " (" + ec.message() + ")" : ""));
}

Json or_null(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

// What the report's roofline needs of an MoE model (common/decode_weight_bytes.h), else null.
Json moe_json(const engine::Runtime& rt) {
  const ModelConfig& c = rt.config();
  if (!c.is_moe() || rt.expert_bytes() == 0) return nullptr;
  return {{"experts", c.moe.num_experts}, {"top_k", c.moe.num_experts_per_tok}, {"expert_bytes", rt.expert_bytes()}};
}

void run_sweep(const ModelFlags& mf, const RunFlags& rf, const SweepFlags& sf) {
  if (!mf.quantization.empty())
    throw Error("--quantization: bench sweep takes the weights of each run from --configs (e.g. --configs \"bf16 " +
                mf.quantization + "\")");
  if (!mf.kv_cache_dtype.empty())
    throw Error("--kv-cache-dtype: bench sweep takes the KV cache of each run from --configs (e.g. fp8+kv, "
                "fp8+kv=fp8_e5m2)");
  if (sf.out_dir.empty()) throw Error("--out-dir: required (the directory for sweep.json and report.html)");
  const std::vector<report::ConfigSpec> configs = parse_configs(sf.configs);
  const std::vector<int64_t> batches = parse_batch_sizes(sf.batch_sizes);
  check_latency_flags(sf.input_len, sf);
  if (!sf.baseline.empty() && std::none_of(configs.begin(), configs.end(),
                                           [&](const report::ConfigSpec& c) { return c.name == sf.baseline; }))
    throw Error("--baseline: '" + sf.baseline + "' is not one of --configs");
  std::optional<double> bandwidth;
  if (!sf.roofline_bandwidth.empty()) bandwidth = parse_bandwidth(sf.roofline_bandwidth, "--roofline-bandwidth");

  // Every configuration's flags are checked before the first one loads.
  std::vector<ModelFlags> flags;
  for (const report::ConfigSpec& c : configs) {
    ModelFlags m = mf;
    m.quantization = c.quantization;
    m.kv_cache_dtype = c.kv_cache_dtype;
    try {
      (void)m.overrides();
    } catch (const Error& e) {
      throw Error("--configs: '" + c.name + "': " + e.what());
    }
    flags.push_back(std::move(m));
  }
  engine::RuntimeOptions options = rf.options();
  const int64_t context =
      max_model_len_for(rf, io::read_model_spec(mf.model, flags[0].overrides()).config.max_position_embeddings);
  prepare_latency_options(options, context, batches.back(), sf.input_len, sf.output_len, sf.max_batched_tokens);
  make_directory(sf.out_dir, "--out-dir");
  const std::filesystem::path json_path = std::filesystem::path(sf.out_dir) / "sweep.json";
  const std::filesystem::path html_path = std::filesystem::path(sf.out_dir) / "report.html";

  const bool cuda = options.device == backend::Device::kCuda;
  std::string bandwidth_source = "given by --roofline-bandwidth";
  if (!bandwidth && cuda) {
    bandwidth = kCeilingBytesPerS;
    bandwidth_source = "the H200's measured copy bandwidth (../shared/docs/gpu.md)";
  }
  const double decode_context = report::decode_context_tokens(sf.input_len, sf.output_len);
  Json names = Json::array();
  for (const report::ConfigSpec& c : configs) names.push_back(c.name);
  Json out = {
      {"benchmark", "sweep"},
      {"schema", 1},
      {"config",
       {{"model", model_dir_name(mf.model)},
        {"model_path", mf.model},
        {"device", cuda ? "cuda" : "cpu"},
        {"load_format", mf.load_format},
        {"configs", names},
        {"batch_sizes", batches},
        {"input_len", sf.input_len},
        {"output_len", sf.output_len},
        {"warmup", sf.warmup},
        {"iters", sf.iters},
        {"max_num_batched_tokens", sf.max_batched_tokens},
        {"baseline", or_null(sf.baseline)},
        {"cpu", cpu_model()},
        {"online_cpus", online_cpus()},
        {"date", utc_now()},
        {"version", FP8LM_VERSION}}},
      {"roofline",
       {{"bandwidth_bytes_per_s", bandwidth ? Json(*bandwidth) : Json(nullptr)},
        {"bandwidth_source", bandwidth ? Json(bandwidth_source) : Json(nullptr)},
        {"decode_context_tokens", decode_context},
        {"formula",
         "batch * bandwidth / (decode_weight_bytes(batch) + batch * decode_context_tokens * "
         "kv_cache_bytes_per_token), decode_weight_bytes: weight_bytes with the embedding table's rows of the "
         "step's tokens (the whole table where tied) and an MoE model's experts routed to"}}},
      {"runs", Json::array()}};

  std::printf("fp8lm bench sweep: %s, %zu configurations x %zu batch sizes, input %lld, output %lld; %lld warmup + "
              "%lld timed iterations (medians)\n",
              out["config"]["model"].get<std::string>().c_str(), configs.size(), batches.size(),
              static_cast<long long>(sf.input_len), static_cast<long long>(sf.output_len),
              static_cast<long long>(sf.warmup), static_cast<long long>(sf.iters));
  std::printf("  %-16s %6s %12s %14s %10s %13s %12s\n", "config", "batch", "TTFT ms", "prefill tok/s", "TPOT ms",
              "decode tok/s", "of roofline");
  std::fflush(stdout);
  const bool has_decode = sf.output_len > 1;
  auto decode_or_null = [&](double v) { return has_decode ? Json(v) : Json(nullptr); };

  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const report::ConfigSpec& spec = configs[ci];
    const ModelFlags& cmf = flags[ci];
    engine::RuntimeOptions copt = rf.options();
    prepare_latency_options(copt, context, batches.back(), sf.input_len, sf.output_len, sf.max_batched_tokens);
    const auto load0 = std::chrono::steady_clock::now();
    std::unique_ptr<engine::Runtime> rt = engine::Runtime::load(cmf.model, cmf.overrides(), copt);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load0).count();
    print_load_summary(*rt, rf);
    // A GPU's cache is what --gpu-memory-utilization leaves: say at once when the largest batch does not fit.
    const int64_t blocks_each = engine::blocks_for_tokens(sf.input_len + sf.output_len, rt->block_size());
    if (rt->blocks().num_total() < batches.back() * blocks_each)
      throw Error("--batch-sizes: configuration '" + spec.name + "': " + std::to_string(batches.back()) +
                  " sequences of " + std::to_string(sf.input_len + sf.output_len) + " tokens need " +
                  std::to_string(batches.back() * blocks_each) + " KV-cache blocks, the cache holds " +
                  std::to_string(rt->blocks().num_total()) +
                  " (drop the batch size or give the cache more memory)");
    const RunDescription run = describe_run(cmf, rf, copt, *rt);
    const double weight_bytes = double(rt->weight_bytes());
    const double kv_per_token = double(kv_cache_bytes_per_token(*rt));

    Json points = Json::array();
    ProgressBar bar("bench sweep " + spec.name, "iterations (warm-up included)");
    const int64_t per_batch = sf.warmup + sf.iters, all = per_batch * int64_t(batches.size());
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int64_t batch = batches[bi];
      const auto prompts = synthetic_prompts(*rt, batch, sf.input_len);
      const LatencySummary s = measure_latency(
          *rt, prompts, sf,
          [&](int64_t done, int64_t, double) {
            bar.update(int64_t(bi) * per_batch + done, all, "batch " + std::to_string(batch));
          });
      std::optional<double> roof;
      if (bandwidth)
        roof = report::decode_roofline_tok_s(double(batch), rt->decode_weight_bytes(batch), kv_per_token, decode_context,
                                             *bandwidth);
      auto per_iteration = [&](double IterationResult::*field) {
        std::vector<double> v;
        for (const IterationResult& r : s.iterations) v.push_back(r.*field);
        return v;
      };
      points.push_back(
          {{"batch_size", batch},
           {"ttft_s", s.ttft},
           {"prefill_tok_s", s.prefill_tok_s},
           {"prefill_calls", s.iterations.front().prefill_calls},
           {"tpot_median_s", decode_or_null(s.tpot_median)},
           {"tpot_mean_s", decode_or_null(s.tpot_mean)},
           {"decode_tok_s", decode_or_null(s.decode_tok_s)},
           {"iteration_s", s.total},
           {"iteration_cpu_s", s.cpu},
           {"other_processes_cpu_share", s.others_share},
           {"roofline_decode_tok_s", roof ? Json(*roof) : Json(nullptr)},
           {"roofline_share", roof && has_decode ? Json(s.decode_tok_s / *roof) : Json(nullptr)},
           {"per_iteration",
            {{"ttft_s", per_iteration(&IterationResult::ttft)},
             {"tpot_median_s", per_iteration(&IterationResult::tpot_median)},
             {"decode_tok_s", per_iteration(&IterationResult::decode_tok_s)}}}});
      char tpot[32] = "-", decode[32] = "-", share[32] = "-";
      if (has_decode) {
        std::snprintf(tpot, sizeof tpot, "%.3f", s.tpot_median * 1e3);
        std::snprintf(decode, sizeof decode, "%.1f", s.decode_tok_s);
      }
      if (roof && has_decode) std::snprintf(share, sizeof share, "%.1f%%", 100.0 * s.decode_tok_s / *roof);
      std::printf("  %-16s %6lld %12.2f %14.1f %10s %13s %12s\n", spec.name.c_str(), static_cast<long long>(batch),
                  s.ttft * 1e3, s.prefill_tok_s, tpot, decode, share);
      std::fflush(stdout);
    }
    out["runs"].push_back({{"name", spec.name},
                           {"quantization", or_null(spec.quantization)},
                           {"kv_cache_dtype_flag", or_null(spec.kv_cache_dtype)},
                           {"config", run.shared},
                           {"load_s", load_s},
                           {"weight_bytes", weight_bytes},
                           {"moe", moe_json(*rt)},
                           {"embedding", embedding_json(rt->embedding_table())},
                           {"kv_cache_bytes_per_token", kv_per_token},
                           {"kv_cache_tokens", rt->blocks().num_total() * rt->block_size()},
                           {"points", points}});
    write_text(json_path, out.dump(2) + "\n");
  }

  const report::ReportData data = report::read_results({{"", json_path.string()}});
  write_text(html_path, report::render_html(data));
  std::printf("wrote %s and %s\n", json_path.string().c_str(), html_path.string().c_str());
}

void run_report(const ReportFlags& f) {
  if (f.out.empty()) throw Error("--out: required (the HTML file to write)");
  std::vector<report::Input> inputs;
  for (const std::string& a : f.inputs) inputs.push_back(report::parse_input(a));
  std::optional<double> bandwidth;
  if (!f.roofline_bandwidth.empty()) bandwidth = parse_bandwidth(f.roofline_bandwidth, "--roofline-bandwidth");
  report::ReportData data = report::read_results(inputs, bandwidth, f.baseline);
  data.title = f.title;
  const std::string html = report::render_html(data);
  if (!f.svg_dir.empty()) {
    make_directory(f.svg_dir, "--svg-dir");
    for (const report::Chart& c : report::render_charts(data))
      write_text(std::filesystem::path(f.svg_dir) / (c.id + ".svg"),
                 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + c.svg);
  }
  write_text(f.out, html);
  std::printf("wrote %s\n", f.out.c_str());
}

void add_baseline_flag(CLI::App* cmd, std::string& baseline) {
  cmd->add_option("--baseline", baseline, "The configuration the others are compared with (default bf16, else the first)");
}

}  // namespace

void add_bench_sweep_command(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "sweep", "bench latency over configurations x batch sizes: one JSON and an HTML report with charts");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto sf = std::make_shared<SweepFlags>();
  cmd->add_option("--configs", sf->configs,
                  "Configurations, each loaded once: bf16 (the checkpoint's weights) or a --quantization value (fp8, "
                  "fp8:block, …), +kv for an FP8 KV cache or +kv=DTYPE (default \"bf16 fp8 fp8+kv\")");
  cmd->add_option("--batch-sizes", sf->batch_sizes, "Batch sizes measured on each (default 1,8,32,64,128,256)");
  add_latency_flags(cmd, sf->input_len, *sf, ", per batch size");
  cmd->add_option("--roofline-bandwidth", sf->roofline_bandwidth,
                  "Memory bandwidth of the decode roofline in bytes/s: 4.29T, 800G (default on cuda: the H200's "
                  "measured 4.29T; on the CPU: none)");
  add_baseline_flag(cmd, sf->baseline);
  cmd->add_option("--out-dir", sf->out_dir, "Directory for sweep.json and report.html (created)")->required();
  cmd->callback([mf, rf, sf] { run_sweep(*mf, *rf, *sf); });
}

void add_bench_report_command(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "report", "Draw saved results (bench sweep, latency and serve JSON) as one self-contained HTML page");
  auto f = std::make_shared<ReportFlags>();
  cmd->add_option("results", f->inputs,
                  "Results files: bench sweep / latency --json / serve --json; LABEL=FILE names the configuration of "
                  "a latency or serve file")
      ->required();
  cmd->add_option("--out", f->out, "The HTML file to write")->required();
  cmd->add_option("--roofline-bandwidth", f->roofline_bandwidth,
                  "Memory bandwidth of the decode roofline in bytes/s: 4.29T, 800G (default: the sweep's; for results "
                  "from cuda the H200's measured 4.29T)");
  add_baseline_flag(cmd, f->baseline);
  cmd->add_option("--title", f->title, "The page's title (default: fp8lm bench report: MODEL)");
  cmd->add_option("--svg-dir", f->svg_dir, "Also write each chart as DIR/<chart>.svg (for documents)");
  cmd->callback([f] { run_report(*f); });
}

}  // namespace fp8lm::cli
