#include "cli/bench_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cli/bench_ceilings.h"
#include "cli/svg_chart.h"
#include "common/error.h"
#include "common/decode_weight_bytes.h"

namespace fp8lm::cli::report {
namespace {

using Json = nlohmann::json;

// ---- reading JSON with errors that name the file and the field ----------------------------

struct Reader {
  const std::string& file;

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(file + ": " + where + " " + what);
  }
  const Json& object(const Json& j, const std::string& key, const std::string& where) const {
    const std::string at = where.empty() ? key : where + "." + key;
    if (!j.contains(key)) fail(at, "is missing");
    if (!j.at(key).is_object()) fail(at, "is not an object");
    return j.at(key);
  }
  const Json& array(const Json& j, const std::string& key, const std::string& where) const {
    const std::string at = where.empty() ? key : where + "." + key;
    if (!j.contains(key)) fail(at, "is missing");
    if (!j.at(key).is_array()) fail(at, "is not an array");
    return j.at(key);
  }
  std::optional<double> opt_number(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    const Json& v = j.at(key);
    if (!v.is_number()) fail(where + "." + key, "is not a number (" + v.dump() + ")");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(where + "." + key, "is not finite");
    return d;
  }
  double number(const Json& j, const std::string& key, const std::string& where) const {
    const std::optional<double> v = opt_number(j, key, where);
    if (!v) fail(where + "." + key, j.contains(key) ? "is null" : "is missing");
    return *v;
  }
  // A number that must be above 0 (a time, a rate).
  double positive(const Json& j, const std::string& key, const std::string& where) const {
    const double v = number(j, key, where);
    if (!(v > 0)) fail(where + "." + key, "is " + svg::format_number(v) + ", not above 0");
    return v;
  }
  std::optional<double> opt_positive(const Json& j, const std::string& key, const std::string& where) const {
    const std::optional<double> v = opt_number(j, key, where);
    if (v && !(*v > 0)) fail(where + "." + key, "is " + svg::format_number(*v) + ", not above 0");
    return v;
  }
  int64_t integer(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.contains(key)) fail(where + "." + key, "is missing");
    const Json& v = j.at(key);
    if (!v.is_number_integer()) fail(where + "." + key, "is not a whole number (" + v.dump() + ")");
    return v.get<int64_t>();
  }
  std::optional<int64_t> opt_integer(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    return integer(j, key, where);
  }
  std::string opt_text(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.contains(key) || j.at(key).is_null()) return "";
    if (!j.at(key).is_string()) fail(where + "." + key, "is not a string (" + j.at(key).dump() + ")");
    return j.at(key).get<std::string>();
  }
  std::string text(const Json& j, const std::string& key, const std::string& where) const {
    if (!j.contains(key)) fail(where + "." + key, "is missing");
    const std::string s = opt_text(j, key, where);
    if (s.empty()) fail(where + "." + key, "is empty");
    return s;
  }
};

void add_distinct(std::vector<std::string>& v, const std::string& s) {
  if (!s.empty() && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

void check_lengths(std::optional<Lengths>& have, int64_t input_len, int64_t output_len, const std::string& file,
                   const char* what) {
  if (!have) {
    have = Lengths{input_len, output_len, file};
    return;
  }
  if (have->input_len != input_len || have->output_len != output_len)
    throw Error(file + ": " + what + " results of input " + std::to_string(input_len) + ", output " +
                std::to_string(output_len) + " tokens, where " + have->source + "'s are of input " +
                std::to_string(have->input_len) + ", output " + std::to_string(have->output_len) +
                ": one report compares runs of the same lengths");
}

// "embedding": {"bytes", "rows", "tied"} of an object, where the file has it (the roofline then
// counts the rows a step reads; files without it count the whole table).
std::optional<EmbeddingTable> read_embedding(const Reader& r, const Json& o, const std::string& at) {
  if (!o.contains("embedding") || o.at("embedding").is_null()) return std::nullopt;
  const std::string here = at + ".embedding";
  const Json& e = r.object(o, "embedding", at);
  const std::optional<double> bytes = r.opt_positive(e, "bytes", here), rows = r.opt_positive(e, "rows", here);
  if (!bytes || !rows || !e.contains("tied") || !e.at("tied").is_boolean())
    r.fail(here, "needs bytes > 0, rows > 0 and tied (true or false)");
  return EmbeddingTable{*bytes, *rows, e.at("tied").get<bool>()};
}

void merge_run(ReportData& data, ConfigRun run) {
  auto it = std::find_if(data.runs.begin(), data.runs.end(), [&](const ConfigRun& r) { return r.name == run.name; });
  if (it == data.runs.end()) {
    data.runs.push_back(std::move(run));
    return;
  }
  ConfigRun& have = *it;
  if (!have.weights.empty() && !run.weights.empty() && have.weights != run.weights)
    throw Error(run.points.front().source + ": configuration '" + run.name + "' has weights " + run.weights +
                ", where " + have.points.front().source + " has " + have.weights +
                " under the same name (name them apart with LABEL=FILE)");
  if (!have.weight_bytes) have.weight_bytes = run.weight_bytes;
  if (!have.embedding) have.embedding = run.embedding;
  if (!have.kv_bytes_per_token) have.kv_bytes_per_token = run.kv_bytes_per_token;
  if (have.backend.empty()) have.backend = run.backend;
  for (LatencyPoint& p : run.points) {
    for (const LatencyPoint& q : have.points)
      if (q.batch_size == p.batch_size)
        throw Error(p.source + ": configuration '" + run.name + "' at batch size " + std::to_string(p.batch_size) +
                    " is in " + q.source + " too");
    have.points.push_back(std::move(p));
  }
}

void note_device(ReportData& data, const std::string& device, const std::string& backend) {
  if (device == "cuda" || backend.rfind("cuda", 0) == 0) data.any_cuda = true;
  add_distinct(data.backends, backend);
}

void note_run_info(ReportData& data, const Reader& r, const Json& config) {
  add_distinct(data.models, r.opt_text(config, "model", "config"));
  add_distinct(data.versions, r.opt_text(config, "version", "config"));
  add_distinct(data.dates, r.opt_text(config, "date", "config"));
}

std::string iterations_text(int64_t warmup, int64_t iters) {
  return std::to_string(warmup) + " warm-up + " + std::to_string(iters) + " timed iteration" + (iters == 1 ? "" : "s");
}

void add_sweep(ReportData& data, const Json& j, const std::string& file, const std::string& label) {
  const Reader r{file};
  if (!label.empty())
    throw Error(file + ": '" + label + "=' names one configuration, but this is a sweep, which names its own (" +
                "give the file without a label)");
  const int64_t schema = r.integer(j, "schema", "");
  if (schema != 1) r.fail("schema", std::to_string(schema) + " is not one this fp8lm reads (1)");
  const Json& config = r.object(j, "config", "");
  note_run_info(data, r, config);
  const int64_t input_len = r.integer(config, "input_len", "config"), output_len = r.integer(config, "output_len", "config");
  check_lengths(data.latency_lengths, input_len, output_len, file, "latency");
  add_distinct(data.iterations, iterations_text(r.integer(config, "warmup", "config"), r.integer(config, "iters", "config")));
  if (j.contains("roofline") && !j.at("roofline").is_null()) {
    const Json& roof = r.object(j, "roofline", "");
    const std::optional<double> bw = r.opt_positive(roof, "bandwidth_bytes_per_s", "roofline");
    if (bw && !data.bandwidth) {
      data.bandwidth = bw;
      data.bandwidth_source = r.opt_text(roof, "bandwidth_source", "roofline");
    }
  }
  const std::string baseline = r.opt_text(config, "baseline", "config");
  if (data.baseline.empty()) data.baseline = baseline;
  const std::string device = r.opt_text(config, "device", "config");
  const Json& runs = r.array(j, "runs", "");
  if (runs.empty()) r.fail("runs", "is empty: the sweep holds no results");
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string at = "runs[" + std::to_string(i) + "]";
    const Json& jr = runs[i];
    if (!jr.is_object()) r.fail(at, "is not an object");
    ConfigRun run;
    run.name = r.text(jr, "name", at);
    if (jr.contains("config")) {
      const Json& c = r.object(jr, "config", at);
      run.weights = r.opt_text(c, "weights", at + ".config");
      run.kv_cache_dtype = r.opt_text(c, "kv_cache_dtype", at + ".config");
      run.backend = r.opt_text(c, "backend", at + ".config");
    }
    note_device(data, device, run.backend);
    run.weight_bytes = r.opt_positive(jr, "weight_bytes", at);
    run.kv_bytes_per_token = r.opt_positive(jr, "kv_cache_bytes_per_token", at);
    if (jr.contains("moe") && !jr.at("moe").is_null()) {
      const Json& m = r.object(jr, "moe", at);
      const std::optional<double> e = r.opt_positive(m, "experts", at + ".moe"), k = r.opt_positive(m, "top_k", at + ".moe"),
                                  b = r.opt_positive(m, "expert_bytes", at + ".moe");
      if (!e || !k || !b || *k > *e) r.fail(at + ".moe", "needs experts >= top_k > 0 and expert_bytes > 0");
      run.moe = ConfigRun::Moe{*e, *k, *b};
    }
    run.embedding = read_embedding(r, jr, at);
    const Json& points = r.array(jr, "points", at);
    if (points.empty()) r.fail(at + ".points", "is empty: configuration '" + run.name + "' has no results");
    for (size_t k = 0; k < points.size(); ++k) {
      const std::string pat = at + ".points[" + std::to_string(k) + "]";
      const Json& jp = points[k];
      if (!jp.is_object()) r.fail(pat, "is not an object");
      LatencyPoint p;
      p.batch_size = r.integer(jp, "batch_size", pat);
      if (p.batch_size < 1) r.fail(pat + ".batch_size", "is " + std::to_string(p.batch_size) + ", not at least 1");
      p.ttft_s = r.positive(jp, "ttft_s", pat);
      p.prefill_tok_s = r.positive(jp, "prefill_tok_s", pat);
      p.tpot_median_s = r.opt_positive(jp, "tpot_median_s", pat);
      p.decode_tok_s = r.opt_positive(jp, "decode_tok_s", pat);
      p.source = file;
      for (const LatencyPoint& q : run.points)
        if (q.batch_size == p.batch_size)
          r.fail(pat, "repeats batch size " + std::to_string(p.batch_size) + " of configuration '" + run.name + "'");
      run.points.push_back(std::move(p));
    }
    merge_run(data, std::move(run));
  }
}

void add_latency(ReportData& data, const Json& j, const std::string& file, const std::string& label) {
  const Reader r{file};
  const Json& config = r.object(j, "config", "");
  const Json& results = r.object(j, "results", "");
  note_run_info(data, r, config);
  check_lengths(data.latency_lengths, r.integer(config, "input_len", "config"), r.integer(config, "output_len", "config"),
                file, "latency");
  if (config.contains("warmup") && config.contains("iters"))
    add_distinct(data.iterations,
                 iterations_text(r.integer(config, "warmup", "config"), r.integer(config, "iters", "config")));
  ConfigRun run;
  run.weights = r.opt_text(config, "weights", "config");
  run.kv_cache_dtype = r.opt_text(config, "kv_cache_dtype", "config");
  run.backend = r.opt_text(config, "backend", "config");
  run.name = !label.empty() ? label : r.opt_text(config, "label", "config");
  if (run.name.empty())
    run.name = config_name(r.opt_text(config, "quantization", "config"), r.opt_text(config, "kv_cache_dtype_flag", "config"),
                           run.weights);
  note_device(data, r.opt_text(config, "device", "config"), run.backend);
  if (j.contains("memory") && j.at("memory").is_object()) {
    const Json& m = j.at("memory");
    run.weight_bytes = r.opt_positive(m, "weight_bytes", "memory");
    run.kv_bytes_per_token = r.opt_positive(m, "kv_cache_bytes_per_token", "memory");
    run.embedding = read_embedding(r, m, "memory");
    // Files of earlier versions: the cache's bytes over its tokens (its padding blocks make it a little more).
    const std::optional<double> bytes = r.opt_positive(m, "kv_cache_bytes", "memory"),
                                tokens = r.opt_positive(m, "kv_cache_tokens", "memory");
    if (!run.kv_bytes_per_token && bytes && tokens) run.kv_bytes_per_token = *bytes / *tokens;
  }
  LatencyPoint p;
  p.batch_size = r.integer(config, "batch_size", "config");
  if (p.batch_size < 1) r.fail("config.batch_size", "is " + std::to_string(p.batch_size) + ", not at least 1");
  p.ttft_s = r.positive(results, "ttft_s", "results");
  p.prefill_tok_s = r.positive(results, "prefill_tok_s", "results");
  p.tpot_median_s = r.opt_positive(results, "tpot_median_s", "results");
  p.decode_tok_s = r.opt_positive(results, "decode_tok_s", "results");
  p.source = file;
  run.points.push_back(std::move(p));
  merge_run(data, std::move(run));
}

// p50 / p90 / p99 of the successful requests' values of `key` (ms), or — files
// written before bench serve kept every request — the summary's median and p99.
Percentiles serve_percentiles(const Reader& r, const Json& j, const std::string& key) {
  Percentiles out;
  if (j.contains("per_request") && j.at("per_request").is_array()) {
    std::vector<double> v;
    const Json& reqs = j.at("per_request");
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::string at = "per_request[" + std::to_string(i) + "]";
      if (!reqs[i].is_object()) r.fail(at, "is not an object");
      if (!reqs[i].value("success", false)) continue;
      if (const std::optional<double> x = r.opt_number(reqs[i], key + "_ms", at)) v.push_back(*x);
    }
    if (!v.empty()) out = {percentile(v, 50), percentile(v, 90), percentile(v, 99)};
    return out;
  }
  const Json& results = r.object(j, "results", "");
  if (results.contains(key) && results.at(key).is_object()) {
    out.p50 = r.opt_number(results.at(key), "median_ms", "results." + key);
    out.p99 = r.opt_number(results.at(key), "p99_ms", "results." + key);
  }
  return out;
}

void add_serve(ReportData& data, const Json& j, const std::string& file, const std::string& label) {
  const Reader r{file};
  const Json& config = r.object(j, "config", "");
  const Json& results = r.object(j, "results", "");
  add_distinct(data.versions, r.opt_text(config, "version", "config"));
  add_distinct(data.dates, r.opt_text(config, "date", "config"));
  check_lengths(data.serve_lengths, r.integer(config, "input_len", "config"), r.integer(config, "output_len", "config"),
                file, "serve");
  ServePoint p;
  const std::string model = r.opt_text(config, "model", "config");
  p.config = !label.empty() ? label : r.opt_text(config, "label", "config");
  if (p.config.empty()) p.config = model;
  if (p.config.empty())
    r.fail("config", "names no model and no label: give the configuration's name as LABEL=" + file);
  const std::optional<int64_t> conc = r.opt_integer(config, "max_concurrency", "config");
  p.unlimited = !conc;
  p.concurrency = conc ? *conc : r.integer(config, "num_prompts", "config");
  if (p.concurrency < 1) r.fail("config.max_concurrency", "is " + std::to_string(p.concurrency) + ", not at least 1");
  if (config.contains("request_rate") && config.at("request_rate").is_number())
    p.request_rate = svg::format_number(config.at("request_rate").get<double>()) + "/s";
  else
    p.request_rate = "inf";
  p.completed = r.integer(results, "completed", "results");
  p.failed = r.integer(results, "failed", "results");
  p.output_tok_s = r.number(results, "output_tok_s", "results");
  p.requests_per_s = r.number(results, "requests_per_s", "results");
  p.ttft_ms = serve_percentiles(r, j, "ttft");
  p.tpot_ms = serve_percentiles(r, j, "tpot");
  p.source = file;
  for (const ServePoint& q : data.serve)
    if (q.config == p.config && q.concurrency == p.concurrency)
      throw Error(file + ": configuration '" + p.config + "' at concurrency " + std::to_string(p.concurrency) +
                  " is in " + q.source + " too" +
                  (label.empty() ? " (bench serve results name their configuration by --label, or give LABEL=FILE)"
                                 : ""));
  add_distinct(data.models, model);
  data.serve.push_back(std::move(p));
}

// ---- drawing ------------------------------------------------------------------------------

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string ratio_text(double r) { return fmt("%.2f", r) + "\xC3\x97"; }  // "1.28×"

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> config_names(const ReportData& d) {
  std::vector<std::string> names;
  for (const ConfigRun& r : d.runs) add_distinct(names, r.name);
  for (const ServePoint& p : d.serve) add_distinct(names, p.config);
  return names;
}

std::string resolve_baseline(const ReportData& d) {
  const std::vector<std::string> names = config_names(d);
  if (!d.baseline.empty()) {
    if (std::find(names.begin(), names.end(), d.baseline) == names.end())
      throw Error("--baseline: '" + d.baseline + "' is not one of the configurations (" + join(names, ", ") + ")");
    return d.baseline;
  }
  if (std::find(names.begin(), names.end(), "bf16") != names.end()) return "bf16";
  return names.empty() ? "" : names.front();
}

struct Colors {
  std::map<std::string, std::string> of;
  explicit Colors(const ReportData& d) {
    const std::vector<std::string> names = config_names(d);
    for (size_t i = 0; i < names.size(); ++i) of[names[i]] = svg::palette(i);
  }
  const std::string& operator()(const std::string& name) const { return of.at(name); }
};

std::vector<int64_t> batch_sizes(const ReportData& d) {
  std::set<int64_t> s;
  for (const ConfigRun& r : d.runs)
    for (const LatencyPoint& p : r.points) s.insert(p.batch_size);
  return {s.begin(), s.end()};
}

const LatencyPoint* point_at(const ConfigRun& r, int64_t batch) {
  for (const LatencyPoint& p : r.points)
    if (p.batch_size == batch) return &p;
  return nullptr;
}

// The x axis of the latency charts: the batch sizes measured, on a log scale, a little room at both ends.
svg::Axis batch_axis(const std::vector<int64_t>& batches) {
  svg::Axis a;
  a.label = "batch size (sequences)";
  a.log = true;
  for (int64_t b : batches) a.ticks.push_back(double(b));
  a.min = double(batches.front()) / 1.4;
  a.max = double(batches.back()) * 1.4;
  return a;
}

// A value axis, logarithmic when the values span more than a factor of 20.
svg::Axis value_axis(const std::string& label, const std::vector<double>& values) {
  svg::Axis a;
  a.label = label;
  double lo = 0, hi = 0;
  for (double v : values)
    if (v > 0) lo = lo == 0 ? v : std::min(lo, v), hi = std::max(hi, v);
  a.log = lo > 0 && hi / lo >= 20;
  return a;
}

std::optional<double> roofline_context(const ReportData& d) {
  if (!d.latency_lengths) return std::nullopt;
  return decode_context_tokens(d.latency_lengths->input_len, d.latency_lengths->output_len);
}

std::optional<double> run_roofline(const ReportData& d, const ConfigRun& r, double batch) {
  const std::optional<double> context = roofline_context(d);
  if (!d.bandwidth || !r.weight_bytes || !context) return std::nullopt;
  return decode_roofline_tok_s(batch, decode_weight_bytes(batch, *r.weight_bytes, r.moe, r.embedding),
                               r.kv_bytes_per_token.value_or(0.0), *context, *d.bandwidth);
}

std::string bandwidth_text(double bytes_per_s) {
  if (bytes_per_s >= 1e12) return fmt("%.3g", bytes_per_s / 1e12) + " TB/s";
  return fmt("%.3g", bytes_per_s / 1e9) + " GB/s";
}

std::string lengths_text(const Lengths& l) {
  return "input " + std::to_string(l.input_len) + ", output " + std::to_string(l.output_len) + " tokens";
}

Chart decode_chart(const ReportData& d, const Colors& color) {
  const std::vector<int64_t> batches = batch_sizes(d);
  svg::LineChart c;
  c.id = "decode-throughput";
  c.title = "Decode throughput by batch size";
  c.x = batch_axis(batches);
  std::vector<double> ys;
  bool roofline = false;
  for (const ConfigRun& r : d.runs) {
    svg::Series s{r.name, color(r.name), {}, false, true};
    for (const LatencyPoint& p : r.points) {
      std::string tip = r.name + ", batch " + std::to_string(p.batch_size) + ": " +
                        (p.decode_tok_s ? svg::format_number(*p.decode_tok_s) : "-") + " tok/s";
      if (p.tpot_median_s) tip += " (TPOT " + svg::format_number(*p.tpot_median_s * 1e3) + " ms)";
      if (const std::optional<double> roof = run_roofline(d, r, double(p.batch_size)); roof && p.decode_tok_s)
        tip += ", " + fmt("%.0f", 100.0 * *p.decode_tok_s / *roof) + "% of the roofline";
      s.points.push_back({double(p.batch_size), p.decode_tok_s, tip});
      if (p.decode_tok_s) ys.push_back(*p.decode_tok_s);
    }
    c.series.push_back(std::move(s));
    if (run_roofline(d, r, 1.0)) {
      svg::Series ref{r.name + " roofline", color(r.name), {}, true, false};
      constexpr int kSamples = 48;
      const double l0 = std::log(*c.x.min), l1 = std::log(*c.x.max);
      for (int i = 0; i <= kSamples; ++i) {
        const double b = std::exp(l0 + (l1 - l0) * double(i) / kSamples);
        const double y = *run_roofline(d, r, b);
        ref.points.push_back({b, y, ""});
        ys.push_back(y);
      }
      c.series.push_back(std::move(ref));
      roofline = true;
    }
  }
  c.y = value_axis("decode tokens/s", ys);
  const Lengths& len = *d.latency_lengths;
  c.subtitle = lengths_text(len) + "; median decode step (TPOT) of " + join(d.iterations, ", ");
  std::string caption = "Tokens generated per second in the decode steps (batch ÷ median TPOT) for each "
                        "configuration.";
  if (roofline) {
    const double context = *roofline_context(d);
    c.notes.push_back({"roofline at " + bandwidth_text(*d.bandwidth), true});
    caption += " Dashed, in each configuration's colour: its memory-bandwidth roofline, batch × " +
               bandwidth_text(*d.bandwidth) + " ÷ (weight bytes + batch × " + fmt("%g", context) +
               " tokens × KV-cache bytes per token) — every weight and each sequence's KV cache read once per "
               "step at the decode steps' mean context (input + output ÷ 2), of the embedding table the rows "
               "of the step's tokens (the whole table where it is lm_head too, or where a file does not "
               "record it), of an MoE model the experts routed to; bandwidth: " + d.bandwidth_source + ".";
  } else {
    caption += " No roofline: no memory bandwidth is known for these results (give --roofline-bandwidth).";
  }
  return {c.id, c.title, caption, svg::render(c)};
}

Chart prefill_chart(const ReportData& d, const Colors& color) {
  const std::vector<int64_t> batches = batch_sizes(d);
  svg::LineChart c;
  c.id = "prefill-throughput";
  c.title = "Prefill throughput by batch size";
  c.subtitle = lengths_text(*d.latency_lengths) + "; median of " + join(d.iterations, ", ");
  c.x = batch_axis(batches);
  std::vector<double> ys;
  for (const ConfigRun& r : d.runs) {
    svg::Series s{r.name, color(r.name), {}, false, true};
    for (const LatencyPoint& p : r.points) {
      s.points.push_back({double(p.batch_size), p.prefill_tok_s,
                          r.name + ", batch " + std::to_string(p.batch_size) + ": " +
                              svg::format_number(p.prefill_tok_s) + " tok/s (TTFT " +
                              svg::format_number(p.ttft_s * 1e3) + " ms)"});
      ys.push_back(p.prefill_tok_s);
    }
    c.series.push_back(std::move(s));
  }
  c.y = value_axis("prefill tokens/s", ys);
  return {c.id, c.title,
          "Prompt tokens processed per second: batch × input length ÷ TTFT, the whole batch's prefill.",
          svg::render(c)};
}

// Each configuration's bars by batch size, the ratio to the baseline's on each.
Chart latency_ratio_chart(const ReportData& d, const Colors& color, const std::string& baseline, bool decode) {
  const std::vector<int64_t> batches = batch_sizes(d);
  const auto base = std::find_if(d.runs.begin(), d.runs.end(), [&](const ConfigRun& r) { return r.name == baseline; });
  auto value = [&](const LatencyPoint* p) -> std::optional<double> {
    if (!p) return std::nullopt;
    return decode ? p->decode_tok_s : std::optional<double>(p->prefill_tok_s);
  };
  svg::BarChart c;
  c.id = decode ? "decode-vs-baseline" : "prefill-vs-baseline";
  c.title = std::string(decode ? "Decode" : "Prefill") + " tokens/s against " + baseline;
  c.subtitle = "the ratio to " + baseline + " above each bar; " + lengths_text(*d.latency_lengths);
  c.x_label = "batch size (sequences)";
  for (int64_t b : batches) c.groups.push_back(std::to_string(b));
  std::vector<double> ys;
  for (const ConfigRun& r : d.runs) {
    svg::BarSeries s{r.name, color(r.name), {}};
    for (int64_t b : batches) {
      svg::Bar bar;
      const std::optional<double> v = value(point_at(r, b));
      bar.values = {v};
      if (v) ys.push_back(*v);
      const std::optional<double> bv = base == d.runs.end() ? std::nullopt : value(point_at(*base, b));
      if (v && bv && r.name != baseline) bar.note = ratio_text(*v / *bv);
      bar.tip = r.name + ", batch " + std::to_string(b) + (bar.note.empty() ? "" : " (" + bar.note + ")");
      s.bars.push_back(std::move(bar));
    }
    c.series.push_back(std::move(s));
  }
  c.y = value_axis(std::string(decode ? "decode" : "prefill") + " tokens/s", ys);
  c.y.log = false;  // ratios read from bar heights need a linear axis from 0
  return {c.id, c.title,
          std::string(decode ? "Decode" : "Prefill") + " tokens/s of every configuration side by side at each batch "
              "size; the number above a bar is its ratio to " + baseline + " at that batch size.",
          svg::render(c)};
}

std::vector<int64_t> concurrencies(const ReportData& d) {
  std::set<int64_t> s;
  for (const ServePoint& p : d.serve) s.insert(p.concurrency);
  return {s.begin(), s.end()};
}

std::vector<std::string> serve_configs(const ReportData& d) {
  std::vector<std::string> names;
  for (const ServePoint& p : d.serve) add_distinct(names, p.config);
  return names;
}

const ServePoint* serve_at(const ReportData& d, const std::string& config, int64_t concurrency) {
  for (const ServePoint& p : d.serve)
    if (p.config == config && p.concurrency == concurrency) return &p;
  return nullptr;
}

std::vector<std::string> concurrency_groups(const ReportData& d) {
  std::vector<std::string> out;
  for (int64_t c : concurrencies(d)) {
    bool unlimited = false;
    for (const ServePoint& p : d.serve) unlimited = unlimited || (p.concurrency == c && p.unlimited);
    out.push_back(unlimited ? "all " + std::to_string(c) : std::to_string(c));
  }
  return out;
}

std::string serve_subtitle(const ReportData& d) {
  return "bench serve, " + lengths_text(*d.serve_lengths) + "; at most C requests in flight";
}

Chart serve_throughput_chart(const ReportData& d, const Colors& color, const std::string& baseline) {
  svg::BarChart c;
  c.id = "serve-throughput";
  c.title = "Serving: output tokens/s by concurrency";
  c.subtitle = serve_subtitle(d);
  c.x_label = "concurrency C (requests in flight)";
  c.groups = concurrency_groups(d);
  const std::vector<std::string> configs = serve_configs(d);
  const bool compare = configs.size() > 1 && std::find(configs.begin(), configs.end(), baseline) != configs.end();
  std::vector<double> ys;
  for (const std::string& name : configs) {
    svg::BarSeries s{name, color(name), {}};
    for (int64_t conc : concurrencies(d)) {
      svg::Bar bar;
      const ServePoint* p = serve_at(d, name, conc);
      const ServePoint* b = serve_at(d, baseline, conc);
      bar.values = {p ? std::optional<double>(p->output_tok_s) : std::nullopt};
      if (p) ys.push_back(p->output_tok_s);
      if (compare && p && b && name != baseline && b->output_tok_s > 0)
        bar.note = ratio_text(p->output_tok_s / b->output_tok_s);
      bar.tip = name + ", concurrency " + std::to_string(conc) + (bar.note.empty() ? "" : " (" + bar.note + ")");
      if (p && p->failed > 0) bar.tip += ", " + std::to_string(p->failed) + " failed";
      s.bars.push_back(std::move(bar));
    }
    c.series.push_back(std::move(s));
  }
  c.y = value_axis("output tokens/s", ys);
  c.y.log = false;
  std::string caption = "Output tokens per second over the whole run (every request's tokens ÷ the run's duration).";
  if (compare) caption += " The number above a bar is its ratio to " + baseline + " at that concurrency.";
  return {c.id, c.title, caption, svg::render(c)};
}

Chart serve_percentile_chart(const ReportData& d, const Colors& color, bool ttft) {
  svg::BarChart c;
  c.id = ttft ? "serve-ttft" : "serve-tpot";
  c.title = std::string(ttft ? "Serving: time to first token" : "Serving: time per output token") +
            ", p50 / p90 / p99";
  c.subtitle = serve_subtitle(d);
  c.x_label = "concurrency C (requests in flight)";
  c.groups = concurrency_groups(d);
  c.levels = {"p50", "p90", "p99"};
  std::vector<double> ys;
  bool missing_p90 = false;
  for (const std::string& name : serve_configs(d)) {
    svg::BarSeries s{name, color(name), {}};
    for (int64_t conc : concurrencies(d)) {
      svg::Bar bar;
      const ServePoint* p = serve_at(d, name, conc);
      if (p) {
        const Percentiles& q = ttft ? p->ttft_ms : p->tpot_ms;
        bar.values = {q.p50, q.p90, q.p99};
        for (const std::optional<double>& v : bar.values)
          if (v) ys.push_back(*v);
        missing_p90 = missing_p90 || (q.p50 && !q.p90);
      } else {
        bar.values = {std::nullopt, std::nullopt, std::nullopt};
      }
      bar.tip = name + ", concurrency " + std::to_string(conc);
      s.bars.push_back(std::move(bar));
    }
    c.series.push_back(std::move(s));
  }
  c.y = value_axis(ttft ? "TTFT (ms)" : "TPOT (ms)", ys);
  std::string caption =
      ttft ? "Time to first token per request (its first streamed token): the 50th, 90th and 99th percentiles "
             "over the successful requests, drawn over each other in one bar (p50 darkest, in front)."
           : "Time per output token per request ((e2e − TTFT) ÷ (output tokens − 1)): the 50th, 90th and 99th "
             "percentiles over the successful requests, drawn over each other in one bar (p50 darkest, in front).";
  if (c.y.log) caption += " Log scale: the values span more than 20×.";
  if (missing_p90)
    caption += " Some files hold no per-request times (bench serve before it wrote them): those bars show p50 "
               "and p99 only.";
  return {c.id, c.title, caption, svg::render(c)};
}

// ---- the page -----------------------------------------------------------------------------

constexpr const char* kStyle = R"(
body { font-family: system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; color: #222222;
       max-width: 1040px; margin: 24px auto; padding: 0 16px; line-height: 1.45; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #dddddd; padding-bottom: 4px; }
.details { color: #555555; font-size: 14px; margin-top: 0; }
nav ul { padding-left: 20px; font-size: 14px; }
figure { margin: 12px 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #eeeeee; }
figcaption { font-size: 13px; color: #444444; max-width: 780px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border: 1px solid #dddddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; }
td.name, th.name { text-align: left; }
footer { margin-top: 32px; font-size: 12px; color: #777777; }
)";

std::string cell(const std::string& s, bool name = false) {
  return std::string(name ? "<td class=\"name\">" : "<td>") + svg::escape(s) + "</td>";
}
std::string cell(const std::optional<double>& v, double scale = 1.0) {
  return cell(v ? svg::format_number(*v * scale) : "-");
}

std::string header_row(const std::vector<std::string>& names, size_t left_columns) {
  std::string s = "<tr>";
  for (size_t i = 0; i < names.size(); ++i)
    s += std::string(i < left_columns ? "<th class=\"name\">" : "<th>") + svg::escape(names[i]) + "</th>";
  return s + "</tr>\n";
}

std::string latency_table(const ReportData& d, const std::string& baseline) {
  const auto base = std::find_if(d.runs.begin(), d.runs.end(), [&](const ConfigRun& r) { return r.name == baseline; });
  std::string s = "<table class=\"latency\">\n" +
                  header_row({"configuration", "weights", "KV cache", "batch", "TTFT ms", "prefill tok/s",
                              "TPOT ms", "decode tok/s", "roofline tok/s", "of roofline", "decode vs " + baseline},
                             3);
  for (const ConfigRun& r : d.runs)
    for (const LatencyPoint& p : r.points) {
      s += "<tr>" + cell(r.name, true) + cell(r.weights, true) + cell(r.kv_cache_dtype, true) +
           cell(std::to_string(p.batch_size)) + cell(p.ttft_s * 1e3) + cell(std::optional<double>(p.prefill_tok_s)) +
           cell(p.tpot_median_s, 1e3) + cell(p.decode_tok_s);
      const std::optional<double> roof = run_roofline(d, r, double(p.batch_size));
      s += cell(roof);
      s += cell(roof && p.decode_tok_s ? fmt("%.0f", 100.0 * *p.decode_tok_s / *roof) + "%" : "-");
      const LatencyPoint* bp = base == d.runs.end() ? nullptr : point_at(*base, p.batch_size);
      s += cell(bp && bp->decode_tok_s && p.decode_tok_s ? ratio_text(*p.decode_tok_s / *bp->decode_tok_s) : "-");
      s += "</tr>\n";
    }
  return s + "</table>\n";
}

std::string serve_table(const ReportData& d) {
  std::string s = "<table class=\"serve\">\n" +
                  header_row({"configuration", "concurrency", "request rate", "completed", "failed",
                              "output tok/s", "requests/s", "TTFT p50 ms", "p90", "p99", "TPOT p50 ms", "p90", "p99"},
                             1);
  for (const std::string& name : serve_configs(d))
    for (int64_t conc : concurrencies(d))
      if (const ServePoint* p = serve_at(d, name, conc))
        s += "<tr>" + cell(name, true) + cell((p->unlimited ? "all " : "") + std::to_string(conc)) +
             cell(p->request_rate) + cell(std::to_string(p->completed)) + cell(std::to_string(p->failed)) +
             cell(std::optional<double>(p->output_tok_s)) + cell(std::optional<double>(p->requests_per_s)) +
             cell(p->ttft_ms.p50) + cell(p->ttft_ms.p90) + cell(p->ttft_ms.p99) + cell(p->tpot_ms.p50) +
             cell(p->tpot_ms.p90) + cell(p->tpot_ms.p99) + "</tr>\n";
  return s + "</table>\n";
}

std::string page_title(const ReportData& d) {
  if (!d.title.empty()) return d.title;
  return "fp8lm bench report" + (d.models.empty() ? std::string() : ": " + join(d.models, ", "));
}

}  // namespace

double decode_roofline_tok_s(double batch, double weight_bytes, double kv_bytes_per_token, double context,
                             double bandwidth) {
  return batch * bandwidth / (weight_bytes + batch * context * kv_bytes_per_token);
}

double decode_context_tokens(int64_t input_len, int64_t output_len) {
  return double(input_len) + double(output_len) / 2.0;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

ConfigSpec parse_config(const std::string& text, const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return Error(flag + ": '" + text + "' " + why +
                 " (a configuration is bf16 or a --quantization value such as fp8 or fp8:block, then optionally "
                 "+kv for an FP8 KV cache or +kv=DTYPE)");
  };
  ConfigSpec c;
  c.name = text;
  const size_t plus = text.find('+');
  const std::string weights = text.substr(0, plus);
  if (weights.empty()) throw bad("names no weights");
  if (weights != "bf16") c.quantization = weights;
  if (plus != std::string::npos) {
    const std::string kv = text.substr(plus + 1);
    if (kv == "kv") c.kv_cache_dtype = "fp8";
    else if (kv.rfind("kv=", 0) == 0 && kv.size() > 3) c.kv_cache_dtype = kv.substr(3);
    else throw bad("has '+" + kv + "' where +kv or +kv=DTYPE belongs");
    if (c.kv_cache_dtype.find('+') != std::string::npos) throw bad("has more than one '+'");
  }
  for (const char ch : text)
    if (std::isspace(static_cast<unsigned char>(ch)) || ch == ',') throw bad("holds a space or a comma");
  return c;
}

std::string config_name(const std::string& quantization, const std::string& kv_cache_dtype_flag,
                        const std::string& weights) {
  std::string name = quantization;
  if (name.empty()) {
    // No online quantization: the checkpoint's own weights, "bf16" unless they are FP8 already.
    name = weights.rfind("FP8", 0) == 0 ? "fp8-checkpoint" : weights.empty() ? "bf16" : weights;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (name == "bfloat16") name = "bf16";
    else if (name == "float16") name = "fp16";
    else if (name == "float32") name = "fp32";
  }
  if (kv_cache_dtype_flag == "fp8" || kv_cache_dtype_flag == "fp8_e4m3") name += "+kv";
  else if (!kv_cache_dtype_flag.empty() && kv_cache_dtype_flag != "auto") name += "+kv=" + kv_cache_dtype_flag;
  return name;
}

Input parse_input(const std::string& argument) {
  const size_t eq = argument.find('=');
  std::error_code ec;
  if (eq == std::string::npos || eq == 0 || std::filesystem::exists(argument, ec)) return {"", argument};
  return {argument.substr(0, eq), argument.substr(eq + 1)};
}

void add_results(ReportData& data, const Json& results, const std::string& name, const std::string& label) {
  if (!results.is_object()) throw Error(name + ": is not a JSON object");
  if (!results.contains("benchmark") || !results.at("benchmark").is_string())
    throw Error(name + ": has no \"benchmark\" field: not the JSON of bench sweep, bench latency or bench serve");
  const std::string kind = results.at("benchmark").get<std::string>();
  if (kind == "sweep") add_sweep(data, results, name, label);
  else if (kind == "latency") add_latency(data, results, name, label);
  else if (kind == "serve") add_serve(data, results, name, label);
  else
    throw Error(name + ": holds bench " + kind + " results; a report draws those of bench sweep, latency and serve");
  add_distinct(data.sources, name);
}

ReportData read_results(const std::vector<Input>& inputs, std::optional<double> bandwidth,
                        const std::string& baseline) {
  if (inputs.empty()) throw Error("bench report: no results files given");
  ReportData data;
  for (const Input& in : inputs) {
    std::ifstream f(in.path, std::ios::binary);
    if (!f) throw Error(in.path + ": cannot be read (" + (std::filesystem::exists(in.path) ? "no permission?" :
                                                          "no such file") + ")");
    std::stringstream text;
    text << f.rdbuf();
    Json j;
    try {
      j = Json::parse(text.str());
    } catch (const Json::parse_error& e) {
      throw Error(in.path + ": is not valid JSON (" + std::string(e.what()) + ")");
    }
    add_results(data, j, std::filesystem::path(in.path).filename().string(), in.label);
  }
  for (ConfigRun& r : data.runs)
    std::sort(r.points.begin(), r.points.end(),
              [](const LatencyPoint& a, const LatencyPoint& b) { return a.batch_size < b.batch_size; });
  std::sort(data.dates.begin(), data.dates.end());
  if (bandwidth) {
    if (!(*bandwidth > 0)) throw Error("--roofline-bandwidth: must be above 0 bytes/s");
    data.bandwidth = bandwidth;
    data.bandwidth_source = "given by --roofline-bandwidth";
  } else if (!data.bandwidth && data.any_cuda) {
    data.bandwidth = kCeilingBytesPerS;
    data.bandwidth_source = "the H200's measured copy bandwidth (../shared/docs/gpu.md)";
  }
  if (!baseline.empty()) data.baseline = baseline;
  resolve_baseline(data);  // an unknown --baseline is an error now, before anything is written
  return data;
}

std::vector<Chart> render_charts(const ReportData& d) {
  const std::string baseline = resolve_baseline(d);
  const Colors color(d);
  std::vector<Chart> charts;
  if (!d.runs.empty()) {
    bool any_decode = false;
    size_t with_decode = 0;
    for (const ConfigRun& r : d.runs) {
      bool has = false;
      for (const LatencyPoint& p : r.points) has = has || p.decode_tok_s.has_value();
      any_decode = any_decode || has;
      with_decode += has;
    }
    if (any_decode) charts.push_back(decode_chart(d, color));
    charts.push_back(prefill_chart(d, color));
    const bool base_has_runs =
        std::any_of(d.runs.begin(), d.runs.end(), [&](const ConfigRun& r) { return r.name == baseline; });
    if (d.runs.size() > 1 && base_has_runs) {
      if (with_decode > 1) charts.push_back(latency_ratio_chart(d, color, baseline, true));
      charts.push_back(latency_ratio_chart(d, color, baseline, false));
    }
  }
  if (!d.serve.empty()) {
    charts.push_back(serve_throughput_chart(d, color, baseline));
    charts.push_back(serve_percentile_chart(d, color, true));
    charts.push_back(serve_percentile_chart(d, color, false));
  }
  return charts;
}

std::string render_html(const ReportData& d) {
  const std::vector<Chart> charts = render_charts(d);
  const std::string baseline = resolve_baseline(d);
  const std::string title = page_title(d);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>" +
                  svg::escape(title) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  s += "<h1>" + svg::escape(title) + "</h1>\n<p class=\"details\">";
  std::vector<std::string> details;
  if (!d.backends.empty()) details.push_back("run on " + join(d.backends, "; "));
  if (!d.versions.empty()) details.push_back("fp8lm " + join(d.versions, ", "));
  if (!d.dates.empty())
    details.push_back(d.dates.front() == d.dates.back() ? d.dates.front() : d.dates.front() + " to " + d.dates.back());
  if (!baseline.empty()) details.push_back("baseline " + baseline);
  for (size_t i = 0; i < details.size(); ++i) s += (i ? "<br/>\n" : "") + svg::escape(details[i]);
  s += "</p>\n<nav><ul>\n";
  for (const Chart& c : charts)
    s += "<li><a href=\"#" + svg::escape(c.id) + "\">" + svg::escape(c.title) + "</a></li>\n";
  if (!d.runs.empty()) s += "<li><a href=\"#latency-table\">Latency results</a></li>\n";
  if (!d.serve.empty()) s += "<li><a href=\"#serve-table\">Serving results</a></li>\n";
  s += "</ul></nav>\n";
  for (const Chart& c : charts)
    s += "<section id=\"" + svg::escape(c.id) + "\">\n<h2>" + svg::escape(c.title) + "</h2>\n<figure>\n" + c.svg +
         "<figcaption>" + svg::escape(c.caption) + "</figcaption>\n</figure>\n</section>\n";
  if (!d.runs.empty()) {
    s += "<section id=\"latency-table\">\n<h2>Latency results</h2>\n<p>" +
         svg::escape(lengths_text(*d.latency_lengths) + "; medians of " + join(d.iterations, ", ") +
                     (d.bandwidth ? "; roofline at " + bandwidth_text(*d.bandwidth) + " (" + d.bandwidth_source + ")"
                                  : "")) +
         "</p>\n" + latency_table(d, baseline) + "</section>\n";
  }
  if (!d.serve.empty())
    s += "<section id=\"serve-table\">\n<h2>Serving results</h2>\n<p>" + svg::escape(serve_subtitle(d)) + "</p>\n" +
         serve_table(d) + "</section>\n";
  s += "<footer>Written by fp8lm bench report from " + svg::escape(join(d.sources, ", ")) + ".</footer>\n";
  return s + "</body>\n</html>\n";
}

}  // namespace fp8lm::cli::report
