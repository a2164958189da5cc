// The server's Prometheus metrics (GET /metrics, text format 0.0.4): latency
// histograms and token / request counters recorded as requests progress, and
// the engine's gauges (running, waiting, KV-cache usage) read when scraped.
// Names follow vLLM's, with the fp8lm: prefix.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace fp8lm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // `# HELP`, `# TYPE` and the _bucket (cumulative, +Inf last), _sum and _count lines, each
  // series with `labels` (`model_name="m"`; empty: none) before `le`.
  void render(std::string& out, const std::string& name, const std::string& help,
              const std::string& labels = "") const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; one more for +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// The engine's state when scraped.
struct EngineGauges {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_cache_usage = 0.0;  // 0..1
  int64_t preemptions = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached
  // Speculative decoding, when the server speculates (vLLM's spec_decode counters): verify rows
  // (drafts), drafted and accepted tokens, and per draft position the accepted ones.
  bool speculative = false;
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  // Structured outputs, when the server has a tokenizer (server/grammar_pool.h): compilations,
  // cache hits, refused specs, the compilations' time, the cache's bytes, and the worker processes
  // started (one a compile thread, and one for each ended past a bound).
  bool structured = false;
  int64_t grammar_compilations = 0, grammar_cache_hits = 0, grammar_failures = 0, grammar_cache_bytes = 0;
  int64_t grammar_worker_starts = 0;
  double grammar_compile_seconds = 0.0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // Thread-safe.
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  // One finished engine request: its end-to-end latency, tokens and reason
  // ("stop", "length", or "abort" for a cancelled one).
  void observe_finished(double e2e_seconds, int64_t prompt_tokens, int64_t generated_tokens, const std::string& reason);

  std::string render(const EngineGauges& g, const std::string& model_name) const;

 private:
  mutable std::mutex mutex_;
  Histogram ttft_, inter_token_, e2e_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_;
};

}  // namespace fp8lm::server
