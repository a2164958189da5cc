// `fp8lm bench structured MODEL --schemas FILE`: what structured outputs cost on the host, for a
// model's vocabulary (its tokenizer.json and config.json alone; no weights are loaded): each JSON
// schema of FILE compiled (median, p90, p99, max ms), then compiled again (every one a cache hit),
// and per schema the time of one step's token mask along a walk of `--steps` tokens (each step
// the lowest allowed id that is not a stop token, so the walk is the same on every run) — the
// host work a constrained row adds to a decode step. With --worker, each schema is also compiled
// the server's way (structured/compile_worker.h): in a worker process, its compiled grammar's JSON
// sent back and rebuilt here — the round trip, the rebuild and the JSON's size per schema.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "common/error.h"
#include "io/model_config_json.h"
#include "structured/compile_worker.h"
#include "structured/grammar_compiler.h"
#include "structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct StructuredFlags {
  std::string model;
  std::string schemas;
  int steps = 64;
  bool worker = false;
  int64_t worker_memory_mib = 2048;
  std::string json;
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

struct Row {
  std::string name;
  double compile_ms = 0, hit_ms = 0, mask_us = 0;
  int steps = 0;
  double worker_ms = 0, rebuild_ms = 0;  // --worker: the round trip (compile + JSON + transfer), the rebuild
  int64_t json_bytes = 0;
};

// `spec` compiled as the server compiles it: in the worker, then rebuilt from its JSON here.
void worker_round_trip(structured::CompileWorker& worker, const structured::GrammarSpec& spec,
                       const structured::GrammarVocabulary& vocab, Row& r) {
  auto t = Clock::now();
  const structured::CompileWorker::Reply reply = worker.compile(spec, t + std::chrono::minutes(5));
  r.worker_ms = ms_since(t);
  if (reply.kind != structured::CompileWorker::Reply::Kind::kCompiled)
    throw Error("--worker: schema '" + r.name + "' did not compile in the worker process: " +
                (reply.text.empty() ? "it ended" : reply.text));
  r.json_bytes = int64_t(reply.text.size());
  t = Clock::now();
  structured::CompiledGrammar::deserialize(reply.text, vocab);
  r.rebuild_ms = ms_since(t);
}

// A process's peak resident memory (VmHWM), MiB; 0 when /proc does not say.
double peak_rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0.0;
}

void run_structured(const StructuredFlags& f) {
  if (f.steps < 1) throw Error("--steps: must be at least 1");
  std::ifstream in(f.schemas, std::ios::binary);
  if (!in) throw Error("--schemas: cannot read " + f.schemas);
  nlohmann::ordered_json list;  // the file's order, in the table and the JSON
  try {
    list = nlohmann::ordered_json::parse(in);
  } catch (const std::exception& e) {
    throw Error("--schemas: " + f.schemas + " is not JSON: " + e.what());
  }
  if (!list.is_object() || list.empty())
    throw Error("--schemas: " + f.schemas + " must be a JSON object of named schemas");
  const std::filesystem::path dir(f.model);
  const ModelConfig config = io::read_model_config(dir);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
  std::vector<int32_t> eos(config.eos_token_ids.begin(), config.eos_token_ids.end());
  if (eos.empty() && tok.eos()) eos.push_back(int32_t(tok.eos()->id));
  const auto t_vocab = Clock::now();
  const structured::GrammarVocabulary vocab(tok, dir / "tokenizer.json", config.vocab_size, eos);
  const double vocab_ms = ms_since(t_vocab);
  // In this process: the compilation's own cost is what is measured (the server's worker processes,
  // structured/compile_worker.h, add the compiled grammar's JSON both ways).
  structured::GrammarCompiler compiler(vocab);
  std::unique_ptr<structured::CompileWorker> worker;
  double worker_start_ms = 0;
  if (f.worker) {
    structured::check_worker_memory_mib(f.worker_memory_mib, "--worker-memory");
    worker = std::make_unique<structured::CompileWorker>(
        structured::CompileWorkerConfig{dir / "tokenizer.json", config.vocab_size, eos, f.worker_memory_mib});
    const auto t = Clock::now();
    worker->wait_ready(t + std::chrono::minutes(5));
    worker_start_ms = ms_since(t);
  }

  std::vector<Row> rows;
  std::vector<uint32_t> mask(structured::mask_words(config.vocab_size));
  for (const auto& [name, schema] : list.items()) {
    const structured::GrammarSpec spec{structured::GrammarSpec::Kind::kJsonSchema, schema.dump(), {}, false};
    Row r{name};
    auto t = Clock::now();
    const auto g = compiler.compile(spec);
    r.compile_ms = ms_since(t);
    t = Clock::now();
    compiler.compile(spec);
    r.hit_ms = ms_since(t);
    if (worker) worker_round_trip(*worker, spec, vocab, r);
    structured::GrammarMatcher m(g, eos);
    std::vector<double> fills;
    for (int s = 0; s < f.steps && !m.terminated(); ++s) {
      t = Clock::now();
      m.fill_mask(mask);
      fills.push_back(1e3 * ms_since(t));
      int32_t next = -1;
      for (int64_t id = 0; id < config.vocab_size && next < 0; ++id)
        if (structured::mask_allows(mask, int32_t(id)) && std::find(eos.begin(), eos.end(), id) == eos.end())
          next = int32_t(id);
      if (next < 0) break;  // only a stop token left: the walk is complete
      m.accept(next);
    }
    r.steps = int(fills.size());
    r.mask_us = quantile(fills, 0.5);
    rows.push_back(r);
  }
  std::vector<double> compile, hit, masks;
  for (const Row& r : rows) compile.push_back(r.compile_ms), hit.push_back(r.hit_ms), masks.push_back(r.mask_us);
  std::printf("fp8lm bench structured: %s, vocabulary %lld ids (%s), %zu schemas (compact JSON)\n", dir.filename().c_str(),
              static_cast<long long>(config.vocab_size), vocab.vocab_type().c_str(), rows.size());
  std::vector<double> round_trip, rebuild;
  int64_t json_bytes = 0;
  for (const Row& r : rows) round_trip.push_back(r.worker_ms), rebuild.push_back(r.rebuild_ms), json_bytes += r.json_bytes;
  std::printf("  %-24s %10s %10s %14s %6s%s\n", "schema", "compile ms", "hit ms", "mask µs (med)", "steps",
              worker ? "  worker ms rebuild ms  JSON KiB" : "");
  for (const Row& r : rows) {
    std::printf("  %-24s %10.2f %10.4f %14.1f %6d", r.name.c_str(), r.compile_ms, r.hit_ms, r.mask_us, r.steps);
    if (worker) std::printf("  %9.2f %10.2f %9.1f", r.worker_ms, r.rebuild_ms, double(r.json_bytes) / 1024.0);
    std::printf("\n");
  }
  std::printf("  vocabulary build ms %.1f; compile ms median %.2f, p90 %.2f, p99 %.2f, max %.2f; cache hits %lld of %zu, "
              "median %.4f ms; mask µs median %.1f, max %.1f\n",
              vocab_ms, quantile(compile, 0.5), quantile(compile, 0.9), quantile(compile, 0.99), quantile(compile, 1.0),
              static_cast<long long>(compiler.stats().cache_hits), rows.size(), quantile(hit, 0.5), quantile(masks, 0.5),
              quantile(masks, 1.0));
  const double worker_peak_mib = worker ? peak_rss_mib(worker->pid()) : 0.0;
  if (worker)
    std::printf("  worker (the server's way): start %.0f ms; round trip ms median %.2f, p99 %.2f; rebuild ms median %.2f, "
                "p99 %.2f; JSON %.2f MiB in all; worker peak RSS %.0f MiB\n",
                worker_start_ms, quantile(round_trip, 0.5), quantile(round_trip, 0.99), quantile(rebuild, 0.5),
                quantile(rebuild, 0.99), double(json_bytes) / 1048576.0, worker_peak_mib);
  if (f.json.empty()) return;
  nlohmann::json out = {{"benchmark", "structured"},
                        {"config", {{"model", dir.filename().string()}, {"vocab_size", config.vocab_size},
                                    {"schemas", f.schemas}, {"steps", f.steps}, {"cpu", cpu_model()}, {"date", utc_now()}}},
                        {"results", {{"vocabulary_ms", vocab_ms},
                                     {"compile_ms_median", quantile(compile, 0.5)},
                                     {"compile_ms_p90", quantile(compile, 0.9)},
                                     {"compile_ms_p99", quantile(compile, 0.99)},
                                     {"compile_ms_max", quantile(compile, 1.0)},
                                     {"cache_hits", compiler.stats().cache_hits},
                                     {"mask_us_median", quantile(masks, 0.5)},
                                     {"schemas", nlohmann::json::array()}}}};
  if (worker)
    out["results"]["worker"] = {{"memory_mib", f.worker_memory_mib},      {"start_ms", worker_start_ms},
                                {"round_trip_ms_median", quantile(round_trip, 0.5)},
                                {"round_trip_ms_p99", quantile(round_trip, 0.99)},
                                {"rebuild_ms_median", quantile(rebuild, 0.5)},
                                {"rebuild_ms_p99", quantile(rebuild, 0.99)},
                                {"json_bytes", json_bytes},               {"peak_rss_mib", worker_peak_mib}};
  for (const Row& r : rows) {
    nlohmann::json row = {{"name", r.name}, {"compile_ms", r.compile_ms}, {"hit_ms", r.hit_ms},
                          {"mask_us_median", r.mask_us}, {"steps", r.steps}};
    if (worker) row.update({{"worker_ms", r.worker_ms}, {"rebuild_ms", r.rebuild_ms}, {"json_bytes", r.json_bytes}});
    out["results"]["schemas"].push_back(row);
  }
  write_json_file(f.json, out);
}

}  // namespace

void add_bench_structured_command(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "structured", "Structured outputs on the host: JSON schemas' compile times, cache hits, a step's mask time");
  auto f = std::make_shared<StructuredFlags>();
  cmd->add_option("model", f->model, "A model directory with config.json and tokenizer.json (no weights are read)")
      ->required();
  cmd->add_option("--schemas", f->schemas, "A JSON object of named JSON schemas (e.g. bench/structured_schemas.json)")
      ->required();
  cmd->add_option("--steps", f->steps, "Tokens of each schema's walk whose masks are timed (default 64)");
  cmd->add_flag("--worker", f->worker,
                "Also compile each schema as the server does: in a worker process, its JSON rebuilt here");
  cmd->add_option("--worker-memory", f->worker_memory_mib,
                  "With --worker: the worker's memory bound in MiB, as serve's --structured-outputs-memory (default 2048)");
  add_json_file_flag(cmd, f->json);
  cmd->callback([f] { run_structured(*f); });
}

}  // namespace fp8lm::cli
