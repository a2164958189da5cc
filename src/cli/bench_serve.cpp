// `fp8lm bench serve --base-url URL --num-prompts N --request-rate R|inf
// --max-concurrency C --input-len I --output-len O`: a client that measures a
// running OpenAI-compatible server (fp8lm serve, or any other), as vLLM's
// benchmark_serving. N streaming POST /v1/completions requests whose prompts
// are I random token ids (fixed seed; ids in [10, 10 + 1000) unless
// --vocab-size V, then [10, V)), each asking for exactly O tokens (greedy,
// ignore_eos, usage in the last chunk). Arrivals: a Poisson process at R
// requests/s (seeded exponential gaps) or all at t = 0 for `inf`; at most C in
// flight (a pool of C client threads: a request that arrives while all are busy
// waits for one). Per request, from the server-sent events: TTFT (the first
// chunk with choices, as vLLM counts it), ITL (every later gap between chunks),
// TPOT ((e2e − TTFT) / (output tokens − 1)), e2e latency, output tokens (the
// usage chunk). A request fails on an HTTP status other than 200, an `error`
// event, a connection error, a stream without usage or [DONE], or fewer tokens
// than asked; failures are counted by reason. The table goes to stdout, with
// --json FILE every number (per request too) and the configuration.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/bench_common.h"
#include "cli/commands.h"
#include "common/error.h"

namespace fp8lm::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct ServeBenchFlags {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;
  int64_t num_prompts = 100;
  std::string request_rate = "inf";
  int64_t max_concurrency = 0;  // only read when given (max_concurrency_given)
  bool max_concurrency_given = false;
  int64_t input_len = 128;
  int64_t output_len = 128;
  int64_t vocab_size = 0;  // 0: ids in [10, 1010)
  std::string api_key;
  int64_t seed = 0;
  double timeout_s = 600.0;
  std::string json;
  std::string label;  // the server's configuration, for bench report ("fp8+kv")
};

constexpr int32_t kFirstId = 10;
constexpr int32_t kDefaultIds = 1000;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// "inf" → +∞; else a finite number > 0.
double parse_rate(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "inf" || lower == "infinity") return std::numeric_limits<double>::infinity();
  double v = 0.0;
  size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v))
    throw Error("--request-rate: '" + s + "' is neither a number of requests per second nor inf");
  if (v <= 0.0) throw Error("--request-rate: " + s + " must be above 0 (or inf: every request at once)");
  return v;
}

// "http://host:port[/prefix][/v1][/]" → the client's origin and the path before /v1.
struct BaseUrl {
  std::string origin;
  std::string prefix;
};

BaseUrl parse_base_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const std::string kind = scheme == std::string::npos ? "" : url.substr(0, scheme);
  if (kind != "http" && kind != "https")
    throw Error("--base-url: '" + url + "' is not an http:// or https:// URL");
  const size_t host = scheme + 3;
  const size_t slash = url.find('/', host);
  BaseUrl b;
  b.origin = url.substr(0, slash);
  if (b.origin.size() == host) throw Error("--base-url: '" + url + "' names no host");
  b.prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!b.prefix.empty() && b.prefix.back() == '/') b.prefix.pop_back();
  if (b.prefix.size() >= 3 && b.prefix.compare(b.prefix.size() - 3, 3, "/v1") == 0) b.prefix.resize(b.prefix.size() - 3);
  return b;
}

httplib::Headers auth_headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

// The `error.message` of an OpenAI-shaped error body, else the body itself (shortened).
std::string error_message(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return body.size() > 200 ? body.substr(0, 200) + "…" : body;
}

// GET /v1/models: the server is there (else a clear error naming the URL) and
// the model to ask for (the first one served unless --model names it).
std::string probe_server(const ServeBenchFlags& f, const BaseUrl& b) {
  httplib::Client cli(b.origin);
  if (!cli.is_valid()) throw Error("--base-url: '" + f.base_url + "' is not a URL this client can connect to");
  cli.set_connection_timeout(5);
  cli.set_read_timeout(30);
  const std::string path = b.prefix + "/v1/models";
  httplib::Result res = cli.Get(path, auth_headers(f.api_key));
  if (!res)
    throw Error("bench serve: cannot reach the server at --base-url " + f.base_url + " (GET " + path +
                ": " + httplib::to_string(res.error()) + "); is `fp8lm serve` running there?");
  if (res->status == 401)
    throw Error("bench serve: the server at " + f.base_url + " refused the API key (401: " +
                error_message(res->body) + "); give it with --api-key");
  if (res->status != 200)
    throw Error("bench serve: GET " + f.base_url + path + " answered HTTP " + std::to_string(res->status) + ": " +
                error_message(res->body));
  const Json j = Json::parse(res->body, nullptr, false);
  std::vector<std::string> ids;
  if (j.is_object() && j.contains("data") && j["data"].is_array())
    for (const Json& m : j["data"])
      if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
  if (!f.model.empty()) {
    if (!ids.empty() && std::find(ids.begin(), ids.end(), f.model) == ids.end()) {
      std::string list;
      for (const std::string& id : ids) list += (list.empty() ? "" : ", ") + id;
      throw Error("--model: '" + f.model + "' is not served at " + f.base_url + " (it serves: " + list + ")");
    }
    return f.model;
  }
  if (ids.empty())
    throw Error("bench serve: GET " + f.base_url + path + " lists no model; name one with --model");
  return ids.front();
}

// One request's measurements (seconds) and outcome.
struct RequestResult {
  bool success = false;
  std::string reason;   // the failure's kind, counted
  std::string message;  // what the server or the connection said
  double start_s = 0.0;  // when it was sent, from the benchmark's start
  double ttft = 0.0;
  double e2e = 0.0;
  double tpot = -1.0;  // < 0: fewer than 2 output tokens
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t chunks = 0;
  std::vector<double> itl;
};

RequestResult send_request(httplib::Client& cli, const std::string& path, const httplib::Headers& headers,
                           const std::string& body, int64_t output_len) {
  RequestResult r;
  int status = 0;
  std::string buffer, error_body;
  bool done = false, usage = false, stream_error = false, malformed = false;
  Clock::time_point t0, last;

  auto on_event = [&](const std::string& event, Clock::time_point now) {
    size_t start = 0;
    while (start < event.size()) {
      size_t end = event.find('\n', start);
      if (end == std::string::npos) end = event.size();
      std::string line = event.substr(start, end - start);
      start = end + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;  // comments, event names
      std::string data = line.substr(5);
      if (!data.empty() && data.front() == ' ') data.erase(0, 1);
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      const Json j = Json::parse(data, nullptr, false);
      if (!j.is_object()) {
        malformed = true;
        continue;
      }
      if (j.contains("error")) {
        if (!stream_error) r.message = error_message(data);
        stream_error = true;
        continue;
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        if (r.chunks == 0)
          r.ttft = seconds(now - t0);
        else
          r.itl.push_back(seconds(now - last));
        last = now;
        ++r.chunks;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        usage = true;
        r.output_tokens = j["usage"].value("completion_tokens", int64_t(0));
        r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
      }
    }
  };

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "text/event-stream");
  req.body = body;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    buffer.append(data, n);
    for (size_t pos; (pos = buffer.find("\n\n")) != std::string::npos;) {
      on_event(buffer.substr(0, pos), now);
      buffer.erase(0, pos + 2);
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  t0 = Clock::now();
  const bool sent = cli.send(req, res, err);
  r.e2e = seconds(Clock::now() - t0);
  if (!buffer.empty() && status == 200) on_event(buffer, Clock::now());

  if (!sent) {
    r.reason = "connection error";
    r.message = httplib::to_string(err);
  } else if (status != 200) {
    r.reason = "HTTP " + std::to_string(status);
    r.message = error_message(error_body);
  } else if (stream_error) {
    r.reason = "error event in the stream";
  } else if (malformed) {
    r.reason = "malformed event";
  } else if (!done) {
    r.reason = "stream ended without [DONE]";
  } else if (!usage) {
    r.reason = "no usage chunk";
  } else if (r.output_tokens < output_len) {
    r.reason = "fewer tokens than asked";
    r.message = std::to_string(r.output_tokens) + " of " + std::to_string(output_len);
  } else if (r.chunks == 0) {
    r.reason = "no chunk with choices";
  } else {
    r.success = true;
  }
  if (r.success && r.output_tokens > 1) r.tpot = (r.e2e - r.ttft) / double(r.output_tokens - 1);
  return r;
}

// numpy.percentile's default (linear interpolation) on sorted values.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q / 100.0 * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

struct Summary {
  size_t n = 0;
  double mean = 0, median = 0, p99 = 0;  // milliseconds
  Json json() const {
    if (n == 0) return Json{{"count", 0}, {"mean_ms", nullptr}, {"median_ms", nullptr}, {"p99_ms", nullptr}};
    return Json{{"count", n}, {"mean_ms", mean}, {"median_ms", median}, {"p99_ms", p99}};
  }
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = 1e3 * std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  s.median = 1e3 * percentile(v, 50);
  s.p99 = 1e3 * percentile(v, 99);
  return s;
}

void run_serve_bench(const ServeBenchFlags& f) {
  check_positive("--num-prompts", f.num_prompts);
  check_lengths(f.input_len, f.output_len);
  if (f.max_concurrency_given) check_positive("--max-concurrency", f.max_concurrency);
  if (f.vocab_size != 0 && f.vocab_size <= kFirstId)
    throw Error("--vocab-size: " + std::to_string(f.vocab_size) + " must be above " + std::to_string(kFirstId) +
                " (prompt ids are drawn from [10, V))");
  if (!(f.timeout_s > 0.0) || !std::isfinite(f.timeout_s))
    throw Error("--timeout: " + std::to_string(f.timeout_s) + " must be a number of seconds above 0");
  if (f.seed < 0) throw Error("--seed: " + std::to_string(f.seed) + " is negative");
  const double rate = parse_rate(f.request_rate);
  const BaseUrl base = parse_base_url(f.base_url);
  const std::string model = probe_server(f, base);

  // Prompts and arrival times, both from --seed.
  const int64_t id_end = f.vocab_size > 0 ? f.vocab_size : kFirstId + kDefaultIds;
  std::mt19937_64 rng(uint64_t(f.seed));
  std::uniform_int_distribution<int64_t> pick(kFirstId, id_end - 1);
  std::vector<std::string> bodies;
  bodies.reserve(size_t(f.num_prompts));
  for (int64_t i = 0; i < f.num_prompts; ++i) {
    std::vector<int64_t> ids(size_t(f.input_len));
    for (int64_t& t : ids) t = pick(rng);
    const Json body = {{"model", model},
                       {"prompt", ids},
                       {"max_tokens", f.output_len},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    bodies.push_back(body.dump());
  }
  std::vector<double> arrival(size_t(f.num_prompts), 0.0);
  if (std::isfinite(rate)) {
    std::mt19937_64 arrivals(uint64_t(f.seed) ^ 0x6172726976616c73ULL);
    std::exponential_distribution<double> gap(rate);
    double t = 0.0;
    for (double& a : arrival) a = (t += gap(arrivals));
    const double first = arrival.front();  // the first request goes at once
    for (double& a : arrival) a -= first;
  }
  const int64_t workers = f.max_concurrency_given ? std::min(f.max_concurrency, f.num_prompts) : f.num_prompts;

  // A pool of `workers` client threads: the queue holds requests that have
  // arrived and wait for a free one.
  std::mutex m;
  std::condition_variable cv;
  std::deque<size_t> queue;
  bool closed = false;
  std::atomic<int64_t> in_flight{0}, max_in_flight{0};
  std::vector<RequestResult> results(size_t(f.num_prompts));
  const std::string path = base.prefix + "/v1/completions";
  const httplib::Headers headers = auth_headers(f.api_key);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(f.timeout_s));
  const std::string load_before = load_average();
  const double cpu0 = process_cpu_seconds();
  const Clock::time_point start = Clock::now();

  auto worker = [&] {
    httplib::Client cli(base.origin);
    cli.set_connection_timeout(10);
    cli.set_read_timeout(timeout);
    cli.set_write_timeout(timeout);
    for (;;) {
      size_t i;
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return closed || !queue.empty(); });
        if (queue.empty()) return;
        i = queue.front();
        queue.pop_front();
      }
      const int64_t now = ++in_flight;
      for (int64_t seen = max_in_flight.load(); now > seen && !max_in_flight.compare_exchange_weak(seen, now);) {
      }
      const double sent_at = seconds(Clock::now() - start);
      results[i] = send_request(cli, path, headers, bodies[i], f.output_len);
      results[i].start_s = sent_at;
      --in_flight;
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(workers));
  for (int64_t w = 0; w < workers; ++w) pool.emplace_back(worker);
  for (size_t i = 0; i < arrival.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
    {
      std::lock_guard lock(m);
      queue.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard lock(m);
    closed = true;
  }
  cv.notify_all();
  for (std::thread& t : pool) t.join();
  const double duration = seconds(Clock::now() - start);
  const double cpu = process_cpu_seconds() - cpu0;

  int64_t completed = 0, input_tokens = 0, output_tokens = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::map<std::string, int64_t> reasons;
  std::map<std::string, std::string> examples;  // the first message of each reason
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++reasons[r.reason];
      examples.emplace(r.reason, r.message);
      continue;
    }
    ++completed;
    input_tokens += r.prompt_tokens;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    if (r.tpot >= 0) tpot.push_back(r.tpot);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  const int64_t failed = f.num_prompts - completed;
  const Summary s_ttft = summarize(ttft), s_tpot = summarize(tpot), s_itl = summarize(itl), s_e2e = summarize(e2e);
  const double req_s = double(completed) / duration;
  const double out_tok_s = double(output_tokens) / duration;
  const double total_tok_s = double(input_tokens + output_tokens) / duration;
  const std::string concurrency = f.max_concurrency_given ? std::to_string(f.max_concurrency) : "unlimited";

  std::printf("fp8lm bench serve: %s at %s\n", model.c_str(), f.base_url.c_str());
  std::printf("%lld prompts, input %lld, output %lld; request rate %s, max concurrency %s, seed %lld\n",
              static_cast<long long>(f.num_prompts), static_cast<long long>(f.input_len),
              static_cast<long long>(f.output_len), std::isfinite(rate) ? f.request_rate.c_str() : "inf",
              concurrency.c_str(), static_cast<long long>(f.seed));
  std::printf("  %-26s %12lld\n", "completed requests", static_cast<long long>(completed));
  std::printf("  %-26s %12lld\n", "failed requests", static_cast<long long>(failed));
  std::printf("  %-26s %12.3f\n", "duration s", duration);
  std::printf("  %-26s %12.2f\n", "requests/s", req_s);
  std::printf("  %-26s %12.1f\n", "output tok/s", out_tok_s);
  std::printf("  %-26s %12.1f\n", "total tok/s", total_tok_s);
  std::printf("  %-26s %12lld\n", "input tokens", static_cast<long long>(input_tokens));
  std::printf("  %-26s %12lld\n", "output tokens", static_cast<long long>(output_tokens));
  std::printf("  %-26s %12lld\n", "max concurrency observed", static_cast<long long>(max_in_flight.load()));
  std::printf("  %-26s %12s %12s %12s\n", "ms", "mean", "median", "p99");
  auto row = [](const char* name, const Summary& s) {
    if (s.n == 0)
      std::printf("  %-26s %12s %12s %12s\n", name, "-", "-", "-");
    else
      std::printf("  %-26s %12.2f %12.2f %12.2f\n", name, s.mean, s.median, s.p99);
  };
  row("TTFT", s_ttft);
  row("TPOT", s_tpot);
  row("ITL", s_itl);
  row("E2E latency", s_e2e);
  for (const auto& [reason, count] : reasons)
    std::printf("  failed: %-18s %12lld   (%s)\n", reason.c_str(), static_cast<long long>(count),
                examples[reason].c_str());

  if (!f.json.empty()) {
    Json failures = Json::object(), failure_examples = Json::object();
    for (const auto& [reason, count] : reasons) {
      failures[reason] = count;
      failure_examples[reason] = examples[reason];
    }
    Json per_request = Json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      const RequestResult& r = results[i];
      Json itl_ms = Json::array();
      for (double g : r.itl) itl_ms.push_back(1e3 * g);
      per_request.push_back({{"index", i},
                             {"success", r.success},
                             {"error", r.success ? Json(nullptr) : Json(r.reason)},
                             {"message", r.message.empty() ? Json(nullptr) : Json(r.message)},
                             {"arrival_s", arrival[i]},
                             {"start_s", r.start_s},
                             {"ttft_ms", 1e3 * r.ttft},
                             {"tpot_ms", r.tpot >= 0 ? Json(1e3 * r.tpot) : Json(nullptr)},
                             {"e2e_ms", 1e3 * r.e2e},
                             {"prompt_tokens", r.prompt_tokens},
                             {"output_tokens", r.output_tokens},
                             {"chunks", r.chunks},
                             {"itl_ms", itl_ms}});
    }
    const Json out = {
        {"benchmark", "serve"},
        {"config",
         {{"base_url", f.base_url},
          {"model", model},
          {"label", f.label.empty() ? Json(nullptr) : Json(f.label)},
          {"endpoint", path},
          {"num_prompts", f.num_prompts},
          {"request_rate", std::isfinite(rate) ? Json(rate) : Json("inf")},
          {"max_concurrency", f.max_concurrency_given ? Json(f.max_concurrency) : Json(nullptr)},
          {"input_len", f.input_len},
          {"output_len", f.output_len},
          {"prompt_ids", {kFirstId, id_end}},
          {"seed", f.seed},
          {"timeout_s", f.timeout_s},
          {"api_key", !f.api_key.empty()},
          {"sampling", "greedy, ignore_eos, stream with include_usage"},
          {"client_threads", workers},
          {"cpu", cpu_model()},
          {"online_cpus", online_cpus()},
          {"load_average_before", load_before},
          {"load_average_after", load_average()},
          {"date", utc_now()},
          {"version", FP8LM_VERSION}}},
        {"results",
         {{"completed", completed},
          {"failed", failed},
          {"failures", failures},
          {"failure_examples", failure_examples},
          {"duration_s", duration},
          {"client_cpu_s", cpu},
          {"requests_per_s", req_s},
          {"output_tok_s", out_tok_s},
          {"total_tok_s", total_tok_s},
          {"input_tokens", input_tokens},
          {"output_tokens", output_tokens},
          {"max_concurrency_observed", max_in_flight.load()},
          {"ttft", s_ttft.json()},
          {"tpot", s_tpot.json()},
          {"itl", s_itl.json()},
          {"e2e", s_e2e.json()}}},
        {"per_request", per_request}};
    write_json_file(f.json, out);
  }
  if (completed == 0) {
    const auto& [reason, count] = *reasons.begin();
    throw Error("bench serve: all " + std::to_string(f.num_prompts) + " requests to " + f.base_url +
                " failed (" + reason + (examples[reason].empty() ? "" : ": " + examples[reason]) + ")");
  }
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
  CLI::App* cmd = bench.add_subcommand(
      "serve", "Load a running OpenAI-compatible server with streaming requests: TTFT, TPOT, ITL, e2e, tokens/s");
  auto f = std::make_shared<ServeBenchFlags>();
  cmd->add_option("--base-url", f->base_url, "The server (default http://127.0.0.1:8000)");
  cmd->add_option("--model", f->model, "The model to ask for (default: the first one GET /v1/models lists)");
  cmd->add_option("--num-prompts", f->num_prompts, "Requests sent (default 100)");
  cmd->add_option("--request-rate", f->request_rate,
                  "Requests per second, Poisson arrivals; inf sends every request at once (default inf)");
  CLI::Option* conc =
      cmd->add_option("--max-concurrency", f->max_concurrency, "Most requests in flight at once (default: no limit)");
  add_length_flags(cmd, f->input_len, f->output_len, "request");
  cmd->add_option("--vocab-size", f->vocab_size, "Prompt ids are drawn from [10, V) (default: [10, 1010))");
  cmd->add_option("--api-key", f->api_key, "Sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--seed", f->seed, "Seeds the prompts and the arrival times (default 0)");
  cmd->add_option("--timeout", f->timeout_s, "Seconds a request may wait for the server's next bytes (default 600)");
  add_json_file_flag(cmd, f->json, "every number (per request too)");
  cmd->add_option("--label", f->label,
                  "The server's configuration (e.g. fp8+kv), written to the JSON for bench report to name its results by");
  cmd->callback([f, conc] {
    f->max_concurrency_given = conc->count() > 0;
    run_serve_bench(*f);
  });
}

}  // namespace fp8lm::cli
