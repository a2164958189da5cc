#include "server/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace fp8lm::server {
namespace {

// The shortest of %.15g / %.17g that reads back as `v` (0.1, not 0.10000000000000001).
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string label_value(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // le: v <= bound
  ++counts_[size_t(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string le = "_bucket{" + (labels.empty() ? "" : labels + ",") + "le=\"";
  const std::string own = labels.empty() ? "" : "{" + labels + "}";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + le + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + le + "+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum" + own + " " + num(sum_) + "\n";
  out += name + "_count" + own + " " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0, 160.0, 640.0}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
            1920.0, 7680.0}),
      finished_{{"stop", 0}, {"length", 0}, {"abort", 0}} {}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}

void ServerMetrics::observe_inter_token(double s) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(s);
}

void ServerMetrics::observe_finished(double e2e, int64_t prompt_tokens, int64_t generated, const std::string& reason) {
  std::lock_guard lock(mutex_);
  e2e_.observe(e2e);
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generated;
  ++finished_[reason];
}

std::string ServerMetrics::render(const EngineGauges& g, const std::string& model_name) const {
  const std::string model = "model_name=\"" + label_value(model_name) + "\"";
  const std::string label = "{" + model + "}";
  std::string out;
  auto gauge = [&](const std::string& name, const std::string& help, const std::string& value) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + label + " " + value + "\n";
  };
  auto counter = [&](const std::string& name, const std::string& help, int64_t value) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n" + name + label + " " +
           std::to_string(value) + "\n";
  };
  gauge("fp8lm:num_requests_running", "Requests in the running batch.", std::to_string(g.running));
  gauge("fp8lm:num_requests_waiting", "Requests waiting to be scheduled (preempted ones included).",
        std::to_string(g.waiting));
  gauge("fp8lm:kv_cache_usage_perc", "KV-cache usage: the share of KV blocks in use, 0 to 1.", num(g.kv_cache_usage));
  counter("fp8lm:num_preemptions_total", "Preemptions (a running request's KV blocks taken back; it is recomputed).",
          g.preemptions);
  counter("fp8lm:prefix_cache_queries_total",
          "Prefix cache queries: tokens of admitted requests looked up (0 without --enable-prefix-caching).",
          g.prefix_cache_queries);
  counter("fp8lm:prefix_cache_hits_total", "Prefix cache hits: looked-up tokens found cached, not recomputed.",
          g.prefix_cache_hits);
  if (g.speculative) {
    counter("fp8lm:spec_decode_num_drafts_total", "Speculative decoding: verify rows (a request's drafts, checked in one step).",
            g.spec_drafts);
    counter("fp8lm:spec_decode_num_draft_tokens_total", "Speculative decoding: drafted tokens.", g.spec_draft_tokens);
    counter("fp8lm:spec_decode_num_accepted_tokens_total", "Speculative decoding: drafted tokens the model confirmed.",
            g.spec_accepted_tokens);
    out += "# HELP fp8lm:spec_decode_num_accepted_tokens_per_pos_total Speculative decoding: accepted drafted tokens "
           "by draft position (0: the first drafted token).\n"
           "# TYPE fp8lm:spec_decode_num_accepted_tokens_per_pos_total counter\n";
    for (size_t i = 0; i < g.spec_accepted_per_pos.size(); ++i)
      out += "fp8lm:spec_decode_num_accepted_tokens_per_pos_total{" + model + ",position=\"" + std::to_string(i) +
             "\"} " + std::to_string(g.spec_accepted_per_pos[i]) + "\n";
  }
  if (g.structured) {
    counter("fp8lm:structured_output_compilations_total",
            "Structured outputs: constraints compiled (JSON schemas, regexes, grammars; cache misses).",
            g.grammar_compilations);
    counter("fp8lm:structured_output_cache_hits_total", "Structured outputs: constraints found compiled in the cache.",
            g.grammar_cache_hits);
    counter("fp8lm:structured_output_compile_failures_total",
            "Structured outputs: constraints refused (invalid, or a feature the library would not enforce).",
            g.grammar_failures);
    out += "# HELP fp8lm:structured_output_compile_seconds_total Structured outputs: seconds spent compiling.\n"
           "# TYPE fp8lm:structured_output_compile_seconds_total counter\n"
           "fp8lm:structured_output_compile_seconds_total{" + model + "} " + num(g.grammar_compile_seconds) + "\n";
    gauge("fp8lm:structured_output_cache_bytes", "Structured outputs: bytes of the compiled constraints cached.",
          std::to_string(g.grammar_cache_bytes));
    counter("fp8lm:structured_output_worker_starts_total",
            "Structured outputs: compile worker processes started (one a thread, then one for each ended past "
            "--structured-outputs-timeout or --structured-outputs-memory).",
            g.grammar_worker_starts);
  }
  std::lock_guard lock(mutex_);
  counter("fp8lm:prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter("fp8lm:generation_tokens_total", "Generated tokens.", generation_tokens_);
  out += "# HELP fp8lm:request_success_total Finished requests by finish reason (abort: cancelled, e.g. the client left).\n"
         "# TYPE fp8lm:request_success_total counter\n";
  for (const auto& [reason, count] : finished_)
    out += "fp8lm:request_success_total{" + model + ",finished_reason=\"" + label_value(reason) + "\"} " +
           std::to_string(count) + "\n";
  ttft_.render(out, "fp8lm:time_to_first_token_seconds", "Time to first token: request arrival to its first token.",
               model);
  inter_token_.render(out, "fp8lm:time_per_output_token_seconds",
                      "Time per output token (TPOT): the time between consecutive tokens of a request.", model);
  e2e_.render(out, "fp8lm:e2e_request_latency_seconds", "End-to-end request latency: arrival to the last token.",
              model);
  return out;
}

}  // namespace fp8lm::server
