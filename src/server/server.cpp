#include "server/server.h"
#include "server/structured_request.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

#include "chat/chat_template.h"
#include "common/error.h"
#include "engine/engine.h"
#include "io/generation_config.h"
#include "server/api.h"
#include "server/chat_page.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/model_info.h"
#include "server/routes.h"
#include "server/tool_calls.h"

namespace fp8lm::server {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return buf;
}

bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump(error_body(e)), "application/json");
}

// A request that finished with "error": 503 when the device ran out of memory
// for its step (another try may find some), 500 when work of its own failed
// (a row that could not be sampled, its text); the others were served as ever.
ApiError failed_request(const std::string& error) {
  const bool memory = error.rfind("out of device memory", 0) == 0;
  return ApiError(memory ? 503 : 500,
                  "the request failed: " + (error.empty() ? std::string("an engine step failed") : error), "", "",
                  "server_error");
}

void send_json(httplib::Response& res, const Json& j) {
  res.status = 200;
  res.set_content(dump(j), "application/json");
}

// How often a non-streaming handler checks that its client is still connected.
constexpr std::chrono::milliseconds kDisconnectPoll{250};

// A timeout flag's seconds as milliseconds, refused by name when not positive and at most a day.
std::chrono::milliseconds whole_ms(double seconds, const char* flag) {
  if (!(seconds > 0 && seconds <= 86400))
    throw Error(std::string(flag) + ": " + std::to_string(seconds) + " seconds; it must be above 0 and at most 86400");
  return std::chrono::milliseconds(std::max<int64_t>(1, int64_t(seconds * 1000)));
}

constexpr const char* kNoTokenizer = "this server runs without a tokenizer (--skip-tokenizer-init)";

}  // namespace

// One HTTP request in flight: its engine requests (one per choice) and the
// events their callbacks produce, in order.
// OpenAI's tool_calls: each {"id", "type": "function", "function": {"name", "arguments"}}; in a
// stream's delta each also has its "index".
Json tool_calls_json(const std::vector<ToolCall>& calls, bool delta) {
  Json list = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = Json::object();
    if (delta) c["index"] = i;
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = Json{{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    list.push_back(std::move(c));
  }
  return list;
}

struct Job {
  struct Event {
    size_t choice = 0;
    engine::RequestOutput out;
  };

  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;
  int64_t created = 0;
  int32_t logprobs = -1;
  bool include_usage = false;
  size_t num_choices = 0;
  size_t choices_per_prompt = 1;  // n
  int64_t prompt_tokens = 0;  // summed over the prompts (each counted once, whatever n)
  Clock::time_point arrival;
  // chat with tools and tool_choice "auto": the calls in each choice's content are parsed.
  ToolCallParser tool_parser = ToolCallParser::kNone;
  Json tools = nullptr;

  std::mutex m;
  std::condition_variable cv;
  std::deque<Event> events;          // guarded by m
  size_t unfinished = 0;             // guarded by m
  std::vector<engine::RequestId> ids;  // guarded by m
  bool cancelled = false;            // guarded by m
  int64_t cached_tokens = 0;         // guarded by m; prompt tokens served from the prefix cache, as prompt_tokens
  std::string cancel_reason;         // guarded by m
  std::string engine_error;          // guarded by m; why a choice finished with "error" (the device ran out of memory)

  // Engine thread only (the callbacks): per-choice token times for the metrics.
  std::vector<Clock::time_point> last_token;
  std::vector<uint8_t> got_token;
};

struct Server::Impl {
  engine::Runtime& rt;
  ServerOptions opt;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<GrammarPool> grammars;  // structured outputs; none without a tokenizer
  std::unique_ptr<chat::ModelChatTemplate> chat_template;
  std::string chat_template_error;  // why chat is unavailable
  std::vector<int32_t> extra_eos;   // generation_config.json's EOS ids beyond config.json's
  engine::SamplingParams defaults;  // requests' sampling defaults (ServerOptions::generation_defaults)
  int64_t cache_tokens = 0;
  int64_t created = unix_time();
  ServerMetrics metrics;
  std::unique_ptr<HttpTransport> http;  // made once the options are checked

  std::thread engine_thread;
  std::mutex loop_m;
  std::condition_variable loop_cv;
  bool engine_quit = false;  // guarded by loop_m

  std::mutex jobs_m;
  std::unordered_set<std::shared_ptr<Job>> jobs;  // guarded by jobs_m
  std::condition_variable jobs_cv;                // a job ended, or stop_now() was called
  bool stop_now_called = false;                   // guarded by jobs_m
  std::atomic<bool> stopping{false};              // new requests get 503 (a drain, then the end)
  std::mutex stop_m;
  std::condition_variable stop_cv;  // stopping became true
  bool bound = false;
  size_t registered_routes = 0;

  Impl(engine::Runtime& runtime, ServerOptions o) : rt(runtime), opt(std::move(o)) {}

  // ---- the engine thread -------------------------------------------------------

  void wake_engine() {
    { std::lock_guard lock(loop_m); }
    loop_cv.notify_one();
  }

  void engine_loop() {
    while (true) {
      {
        std::unique_lock lock(loop_m);
        loop_cv.wait(lock, [&] { return engine_quit || engine->has_work(); });
        if (engine_quit) return;
      }
      try {
        engine->step();
      } catch (const std::exception& e) {
        // A bug, never the client's input (requests are checked before they are added).
        std::fprintf(stderr, "fp8lm: internal error in an engine step: %s; cancelling every request\n", e.what());
        cancel_all("internal error: " + std::string(e.what()));
      }
    }
  }

  // ---- jobs --------------------------------------------------------------------

  void cancel_job(Job& job, const std::string& reason) {
    std::vector<engine::RequestId> ids;
    {
      std::lock_guard lock(job.m);
      if (job.cancelled) return;
      job.cancelled = true;
      job.cancel_reason = reason;
      ids = job.ids;
    }
    for (const engine::RequestId id : ids) engine->cancel(id);
    wake_engine();
  }

  void cancel_all(const std::string& reason) {
    std::vector<std::shared_ptr<Job>> all;
    {
      std::lock_guard lock(jobs_m);
      all.assign(jobs.begin(), jobs.end());
    }
    for (const auto& j : all) cancel_job(*j, reason);
  }

  void register_job(const std::shared_ptr<Job>& job) {
    std::lock_guard lock(jobs_m);
    if (stopping) throw shutting_down();
    jobs.insert(job);
  }

  void unregister_job(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard lock(jobs_m);
      jobs.erase(job);
    }
    jobs_cv.notify_all();
  }

  // The graceful shutdown, once stopping is set: requests in flight may finish
  // until the deadline (or stop_now()); what is left is then cancelled, so
  // every stream writes its error event and [DONE] and every other request
  // gets a whole 503. Returns when no request is left.
  void drain() {
    http->drain();  // every response from now on closes its connection
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(opt.shutdown_timeout));
    std::unique_lock lock(jobs_m);
    if (!jobs.empty() && !stop_now_called && !opt.quiet)
      std::fprintf(stderr, "fp8lm: letting %zu request(s) in flight finish, for up to %g s (--shutdown-timeout; "
                   "signal again to cancel them now)\n", jobs.size(), opt.shutdown_timeout);
    jobs_cv.wait_until(lock, deadline, [&] { return jobs.empty() || stop_now_called; });
    if (!jobs.empty() && !opt.quiet)
      std::fprintf(stderr, "fp8lm: cancelling %zu request(s) still in flight\n", jobs.size());
    lock.unlock();
    cancel_all("the server is shutting down");
    lock.lock();
    jobs_cv.wait(lock, [&] { return jobs.empty(); });  // each stream ends within a write timeout
  }

  // Called on the engine thread for every output of choice `c`.
  void on_output(const std::shared_ptr<Job>& job, size_t c, const engine::RequestOutput& o) {
    const auto now = Clock::now();
    if (!o.new_tokens.empty()) {
      // A verify step's tokens (speculative decoding) share the interval: each is observed at
      // its share of it, so TPOT stays a time per token.
      if (!job->got_token[c]) {
        metrics.observe_ttft(seconds(now - job->arrival));  // the prefill's one token
      } else {
        const double each = seconds(now - job->last_token[c]) / double(o.new_tokens.size());
        for (size_t i = 0; i < o.new_tokens.size(); ++i) metrics.observe_inter_token(each);
      }
      job->got_token[c] = 1;
      job->last_token[c] = now;
    }
    if (o.finished)
      metrics.observe_finished(seconds(now - job->arrival), o.prompt_tokens, o.completion_tokens,
                               o.finish_reason == "cancelled" ? "abort" : o.finish_reason);
    {
      std::lock_guard lock(job->m);
      // Each prompt once, like prompt_tokens: its first choice's count.
      if (o.finished && c % job->choices_per_prompt == 0) job->cached_tokens += o.cached_tokens;
      if (o.finish_reason == "error" && job->engine_error.empty()) job->engine_error = o.error;
      job->events.push_back({c, o});
      if (o.finished) --job->unfinished;
    }
    job->cv.notify_all();
  }

  // ---- requests ------------------------------------------------------------------

  void check_model(const std::string& model) const {
    if (!model.empty() && model != opt.served_model_name)
      throw ApiError(404, "The model `" + model + "` does not exist (this server serves `" + opt.served_model_name + "`).",
                     "model", "model_not_found");
  }

  std::string token_text(int32_t id) const {
    if (opt.skip_tokenizer_init) return "token_id:" + std::to_string(id);  // vLLM's spelling without text
    const uint32_t u = uint32_t(id);
    return rt.tokenizer().decode(std::span<const uint32_t>(&u, 1), /*skip_special_tokens=*/false);
  }

  // A prompt must leave room for one generated token; a longer text is
  // refused while tokenizing (encode_at_most), before the work of a full encode.
  size_t max_prompt_tokens() const { return size_t(std::max<int64_t>(0, opt.max_model_len - 1)); }

  [[noreturn]] void refuse_long_prompt(const char* param) const {
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(opt.max_model_len) +
                       " tokens. However, your " + param + " has more than " + std::to_string(max_prompt_tokens()) +
                       " tokens, which leaves no room to generate. Please reduce the length of the " + param + ".",
                   param, "context_length_exceeded");
  }

  // A chat request's messages through the chat template.
  std::string render_chat(const ApiRequest& r) const {
    if (!chat_template) throw ApiError(400, chat_template_error, "messages");
    chat::ChatInputs in;
    in.messages = r.messages;
    in.add_generation_prompt = r.add_generation_prompt;
    in.kwargs = r.chat_template_kwargs;
    in.tools = r.tools;
    try {
      return chat_template->render(in);
    } catch (const Error& e) {
      throw ApiError(400, std::string("the chat template could not render the messages: ") + e.what(), "messages");
    }
  }

  // `chat_text`, when given, receives a chat request's rendered prompt.
  std::vector<std::vector<int32_t>> prompts_of(const ApiRequest& r, std::string* chat_text = nullptr) const {
    std::vector<std::vector<int32_t>> out;
    const int64_t vocab = rt.model().vocab_size();
    const char* param = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
    if (opt.skip_tokenizer_init && !r.params.stop.empty())
      throw ApiError(400, std::string(kNoTokenizer) + ": stop strings need text; use stop_token_ids", "stop");
    if (r.endpoint == Endpoint::kChat) {
      const std::string text = render_chat(r);
      // The template wrote every special token the model expects (as `fp8lm chat`).
      const auto ids = rt.tokenizer().encode_at_most(text, /*add_special_tokens=*/false, max_prompt_tokens());
      if (!ids) refuse_long_prompt(param);
      out.emplace_back(ids->begin(), ids->end());
      if (chat_text != nullptr) *chat_text = text;
    } else {
      for (const PromptInput& p : r.prompts) {
        if (p.is_text) {
          if (opt.skip_tokenizer_init)
            throw ApiError(400, std::string(kNoTokenizer) + ": send the prompt as token ids", "prompt");
          const auto ids = rt.tokenizer().encode_at_most(p.text, /*add_special_tokens=*/true,
                                                          max_prompt_tokens());  // as `fp8lm generate`
          if (!ids) refuse_long_prompt(param);
          out.emplace_back(ids->begin(), ids->end());
        } else {
          for (const int32_t id : p.ids)
            if (id >= vocab)
              throw ApiError(400, "prompt token id " + std::to_string(id) + " is outside the vocabulary of " +
                                      std::to_string(vocab), "prompt");
          out.push_back(p.ids);
        }
      }
    }
    for (const auto& p : out)
      if (p.empty()) throw ApiError(400, std::string("the ") + param + " is empty: there is nothing to generate from", param);
    return out;
  }

  void handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    const auto arrival = Clock::now();
    const Json body = parse_body(req.body);
    const ApiRequest r =
        endpoint == Endpoint::kChat ? parse_chat_request(body, defaults) : parse_completion_request(body, defaults);
    check_model(r.model);
    if (stopping) throw shutting_down();
    // Counted before any prompt is tokenized: a list of prompts the server
    // would never queue costs nothing.
    const size_t num_prompts = endpoint == Endpoint::kChat ? 1 : r.prompts.size();
    const size_t count = num_prompts * size_t(r.n);
    if (int64_t(count) > opt.max_waiting)
      throw ApiError(400,
                     std::to_string(num_prompts) + " prompt(s) × n = " + std::to_string(r.n) + " makes " +
                         std::to_string(count) + " sequences, more than this server ever queues (--max-waiting " +
                         std::to_string(opt.max_waiting) + ")",
                     "n");
    std::string chat_text;  // the rendered chat: where a reasoning model's thinking may already have ended
    const std::vector<std::vector<int32_t>> prompts = prompts_of(r, &chat_text);
    std::vector<int64_t> prompt_tokens;
    for (const auto& p : prompts) prompt_tokens.push_back(int64_t(p.size()));
    check_expanded_size(r, prompt_tokens);  // before the n copies per prompt below
    std::vector<int32_t> max_tokens;
    for (const auto& p : prompts) max_tokens.push_back(resolve_max_tokens(r, int64_t(p.size()), opt.max_model_len, cache_tokens));
    if (engine->num_waiting() + int64_t(count) > opt.max_waiting)
      throw ApiError(503,
                     "the server is overloaded: " + std::to_string(engine->num_waiting()) +
                         " requests are waiting (limit " + std::to_string(opt.max_waiting) + ", --max-waiting); retry later",
                     "", "", "server_overloaded");

    // Structured outputs: compiled on the grammar pool (bounded in time), before anything queues.
    std::shared_ptr<const structured::CompiledGrammar> grammar;
    std::optional<structured::GrammarSpec> constraint = r.grammar;
    std::string constraint_param = r.grammar_param;
    if (r.tool_choice_required && opt.tool_call_parser != ToolCallParser::kNone) {
      // Calls in the parser's format, arguments valid under the tools' schemas.
      constraint = structured::GrammarSpec{structured::GrammarSpec::Kind::kStructuralTag,
                                           tool_call_structural_tag(opt.tool_call_parser, r.tools, r.tool_choice_name,
                                                                    !r.parallel_tool_calls),
                                           {}, true};
      constraint_param = "tool_choice";
    }
    // A reasoning model thinks first: the constraint holds after </think> (unless the prompt closed it).
    if (constraint && endpoint == Endpoint::kChat && opt.reasoning != ReasoningParser::kNone &&
        !reasoning_ended(chat_text))
      constraint = after_reasoning(*constraint, opt.reasoning, constraint_param);
    if (constraint) {
      if (!grammars)
        throw ApiError(400, std::string(kNoTokenizer) + ": structured outputs need its vocabulary", constraint_param);
      grammar = grammars->compile(*constraint, constraint_param);
    }

    auto job = std::make_shared<Job>();
    job->endpoint = endpoint;
    job->id = random_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    job->created = unix_time();
    job->logprobs = r.logprobs;
    job->include_usage = r.include_usage;
    if (r.parse_tool_calls) {
      if (opt.tool_call_parser == ToolCallParser::kNone)
        throw ApiError(400, std::string(r.tool_choice_required ? "a required or named" : "\"auto\"") +
                                " tool choice requires the server to be started with --tool-call-parser",
                       "tool_choice");
      job->tool_parser = opt.tool_call_parser;
      job->tools = r.tools;
    }
    job->num_choices = count;
    job->choices_per_prompt = size_t(r.n);
    job->unfinished = count;
    job->arrival = arrival;
    job->last_token.resize(count);
    job->got_token.resize(count);
    for (const auto& p : prompts) job->prompt_tokens += int64_t(p.size());

    register_job(job);
    // Until a streaming response owns the job, leaving this function ends it.
    struct Owner {
      Impl& s;
      std::shared_ptr<Job> job;
      bool handed_over = false;
      ~Owner() {
        if (handed_over) return;
        bool unfinished = false;
        {
          std::lock_guard lock(job->m);
          unfinished = job->unfinished > 0;
        }
        if (unfinished) s.cancel_job(*job, "the request ended");
        s.unregister_job(job);
      }
    } owner{*this, job};

    for (size_t p = 0; p < prompts.size(); ++p) {
      for (int32_t j = 0; j < r.n; ++j) {
        const size_t c = p * size_t(r.n) + size_t(j);
        engine::Request er;
        er.prompt = prompts[p];
        er.params = r.params;
        er.params.max_tokens = max_tokens[p];
        if (er.params.seed && j > 0) er.params.seed = *er.params.seed + uint64_t(j);  // n choices differ, reproducibly
        engine::add_eos_stops(er.params, extra_eos);
        er.logprobs = r.logprobs;
        er.detokenize = !opt.skip_tokenizer_init;
        er.grammar = grammar;
        er.on_output = [this, job, c](const engine::RequestOutput& o) { on_output(job, c, o); };
        engine::RequestId id = 0;
        try {
          id = engine->add_request(std::move(er));
        } catch (const Error& e) {
          throw ApiError(400, e.what(), endpoint == Endpoint::kChat ? "messages" : "prompt");
        }
        bool cancel_now = false;
        {
          std::lock_guard lock(job->m);
          job->ids.push_back(id);
          cancel_now = job->cancelled;
        }
        if (cancel_now) engine->cancel(id);
      }
    }
    wake_engine();

    if (!r.stream) {
      // Nothing is written until the answer is ready, so a client that leaves is
      // noticed by watching its connection (a few times a second): its engine
      // requests are then cancelled (by `owner`) and their KV blocks freed.
      std::unique_lock lock(job->m);
      while (!job->cv.wait_for(lock, kDisconnectPoll, [&] { return job->unfinished == 0; })) {
        lock.unlock();
        if (HttpTransport::client_gone()) {
          cancel_job(*job, "the client disconnected");
          return;
        }
        lock.lock();
      }
      lock.unlock();
      send_json(res, whole_response(*job));
      return;
    }
    start_stream(res, job);
    owner.handed_over = true;
  }

  // ---- whole responses -------------------------------------------------------------

  // With prefix caching, usage says how many prompt tokens were cached (as OpenAI's API).
  Json usage_of(Job& job, int64_t completion_tokens) {
    std::optional<int64_t> cached;
    if (opt.scheduler.enable_prefix_caching) {
      std::lock_guard lock(job.m);
      cached = job.cached_tokens;
    }
    return usage_json(job.prompt_tokens, completion_tokens, cached);
  }

  Json whole_response(Job& job) {
    std::vector<ChoiceResult> choices(job.num_choices);
    std::string cancelled, engine_error;
    {
      std::lock_guard lock(job.m);
      for (Job::Event& e : job.events) {
        ChoiceResult& c = choices[e.choice];
        c.text += e.out.text;
        c.tokens.insert(c.tokens.end(), e.out.new_tokens.begin(), e.out.new_tokens.end());
        for (auto& lp : e.out.logprobs) c.logprobs.push_back(std::move(lp));
        if (e.out.finished) c.finish_reason = e.out.finish_reason;
      }
      job.events.clear();
      cancelled = job.cancel_reason;
      engine_error = job.engine_error;
    }
    for (const ChoiceResult& c : choices) {
      if (c.finish_reason == "error") throw failed_request(engine_error);
      if (c.finish_reason == "cancelled") {
        if (cancelled.rfind("internal error", 0) == 0) throw ApiError(500, cancelled, "", "", "server_error");
        throw ApiError(503, "the request was cancelled: " + (cancelled.empty() ? std::string("the server is shutting down") : cancelled),
                       "", "", "server_error");
      }
    }
    const TokenText text = [this](int32_t id) { return token_text(id); };
    Json out = Json::object();
    out["id"] = job.id;
    out["object"] = job.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion";
    out["created"] = job.created;
    out["model"] = opt.served_model_name;
    Json list = Json::array();
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      ChoiceResult& c = choices[i];
      completion_tokens += int64_t(c.tokens.size());
      Json choice = Json::object();
      choice["index"] = i;
      if (job.endpoint == Endpoint::kChat) {
        ReasoningSplitter split(opt.reasoning);
        ReasoningSplitter::Delta d = split.push(c.text);
        const ReasoningSplitter::Delta tail = split.finish();
        d.reasoning += tail.reasoning;
        d.content += tail.content;
        Json message = Json::object();
        message["role"] = "assistant";
        message["content"] = d.content;
        if (opt.reasoning != ReasoningParser::kNone)
          message["reasoning_content"] = d.reasoning.empty() ? Json(nullptr) : Json(d.reasoning);
        if (job.tool_parser != ToolCallParser::kNone) {
          ToolCallOutput calls = extract_tool_calls(job.tool_parser, d.content, job.tools);
          if (!calls.calls.empty()) {
            message["content"] = calls.content ? Json(*calls.content) : Json(nullptr);
            message["tool_calls"] = tool_calls_json(calls.calls, false);
            c.finish_reason = "tool_calls";
          }
        }
        choice["message"] = std::move(message);
        choice["logprobs"] = job.logprobs >= 0 ? chat_logprobs(c.logprobs, job.logprobs, text) : Json(nullptr);
      } else {
        choice["text"] = c.text;  // empty with --skip-tokenizer-init: the engine makes no text
        if (opt.skip_tokenizer_init) choice["token_ids"] = c.tokens;
        int64_t offset = 0;
        choice["logprobs"] = job.logprobs >= 0 ? completion_logprobs(c.logprobs, job.logprobs, text, offset) : Json(nullptr);
      }
      choice["finish_reason"] = c.finish_reason;
      list.push_back(std::move(choice));
    }
    out["choices"] = std::move(list);
    out["usage"] = usage_of(job, completion_tokens);
    return out;
  }

  // ---- streams -----------------------------------------------------------------------

  struct StreamState {
    bool started = false;
    std::vector<ReasoningSplitter> splitters;  // chat: one per choice
    std::vector<ToolCallStream> tool_streams;  // chat with tool calls parsed: one per choice
    std::vector<int64_t> offsets;              // completions logprobs: text offset per choice
    int64_t completion_tokens = 0;
    bool failed = false;  // a choice finished with "error"
  };

  Json chunk_base(const Job& job) const {
    Json j = Json::object();
    j["id"] = job.id;
    j["object"] = job.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
    j["created"] = job.created;
    j["model"] = opt.served_model_name;
    return j;
  }

  static std::string event(const Json& j) { return "data: " + dump(j) + "\n\n"; }

  std::string chunk(const Job& job, size_t index, Json choice_fields) const {
    Json j = chunk_base(job);
    Json choice = Json::object();
    choice["index"] = index;
    for (auto it = choice_fields.begin(); it != choice_fields.end(); ++it) choice[it.key()] = it.value();
    j["choices"] = Json::array({std::move(choice)});
    if (job.include_usage) j["usage"] = nullptr;
    return event(j);
  }

  // The server-sent events for one engine output (possibly none).
  std::string events_for(Job& job, StreamState& st, Job::Event& e) {
    const engine::RequestOutput& o = e.out;
    st.completion_tokens += int64_t(o.new_tokens.size());
    if (o.finish_reason == "cancelled" || o.finish_reason == "error") return {};  // handled by the caller
    const bool with_lp = job.logprobs >= 0 && !o.logprobs.empty();
    const TokenText text = [this](int32_t id) { return token_text(id); };
    Json fields = Json::object();
    std::string finish_reason = o.finish_reason;  // chat: "tool_calls" where the output's calls parsed
    if (job.endpoint == Endpoint::kChat) {
      ReasoningSplitter::Delta d = st.splitters[e.choice].push(o.text);
      if (o.finished) {
        const ReasoningSplitter::Delta tail = st.splitters[e.choice].finish();
        d.reasoning += tail.reasoning;
        d.content += tail.content;
      }
      Json calls = nullptr;
      if (job.tool_parser != ToolCallParser::kNone) {
        ToolCallStream& ts = st.tool_streams[e.choice];
        d.content = ts.push(d.content);
        if (o.finished) {
          ToolCallOutput end = ts.finish();
          if (end.content) d.content += *end.content;
          if (!end.calls.empty()) {
            calls = tool_calls_json(end.calls, true);
            finish_reason = "tool_calls";
          }
        }
      }
      if (d.content.empty() && d.reasoning.empty() && !o.finished && !with_lp) return {};
      Json delta = Json::object();
      if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
      if (!d.content.empty()) delta["content"] = d.content;
      if (!calls.is_null()) delta["tool_calls"] = std::move(calls);
      fields["delta"] = std::move(delta);
      fields["logprobs"] = with_lp ? chat_logprobs(o.logprobs, job.logprobs, text) : Json(nullptr);
    } else {
      // Without a tokenizer there is no text: every token gets its chunk, with its id.
      const bool nothing_new = opt.skip_tokenizer_init ? o.new_tokens.empty() : o.text.empty() && !with_lp;
      if (nothing_new && !o.finished) return {};
      fields["text"] = o.text;
      if (opt.skip_tokenizer_init) fields["token_ids"] = o.new_tokens;
      fields["logprobs"] = with_lp ? completion_logprobs(o.logprobs, job.logprobs, text, st.offsets[e.choice]) : Json(nullptr);
    }
    fields["finish_reason"] = o.finished ? Json(finish_reason) : Json(nullptr);
    return chunk(job, e.choice, std::move(fields));
  }

  void start_stream(httplib::Response& res, const std::shared_ptr<Job>& job) {
    auto st = std::make_shared<StreamState>();
    st->offsets.assign(job->num_choices, 0);
    for (size_t i = 0; i < job->num_choices; ++i) st->splitters.emplace_back(opt.reasoning);
    for (size_t i = 0; i < job->num_choices; ++i) st->tool_streams.emplace_back(job->tool_parser, job->tools);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, st](size_t, httplib::DataSink& sink) -> bool {
          std::string out;
          if (!st->started) {
            st->started = true;
            if (job->endpoint == Endpoint::kChat)
              for (size_t i = 0; i < job->num_choices; ++i)
                out += chunk(*job, i, Json{{"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                           {"logprobs", nullptr},
                                           {"finish_reason", nullptr}});
          }
          std::deque<Job::Event> events;
          bool all_done = false;
          std::string cancel_reason, engine_error;
          {
            std::unique_lock lock(job->m);
            if (out.empty()) job->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !job->events.empty(); });
            events.swap(job->events);
            all_done = job->unfinished == 0;
            cancel_reason = job->cancel_reason;
            engine_error = job->engine_error;
          }
          // Nothing to write (e.g. still queued): a client that left is noticed
          // here, not at a write that may be far away, so its requests stop
          // counting against --max-waiting. Returning false ends the response.
          if (out.empty() && events.empty() && !all_done) return !HttpTransport::client_gone();
          bool cancelled = false;
          for (Job::Event& e : events) {
            cancelled = cancelled || e.out.finish_reason == "cancelled";
            st->failed = st->failed || e.out.finish_reason == "error";
            out += events_for(*job, *st, e);
          }
          if (all_done) {
            if (st->failed) {
              out += event(error_body(failed_request(engine_error)));
            } else if (cancelled) {
              const bool internal = cancel_reason.rfind("internal error", 0) == 0;
              out += event(error_body(ApiError(internal ? 500 : 503,
                                               "the request was cancelled: " +
                                                   (cancel_reason.empty() ? std::string("the server is shutting down") : cancel_reason),
                                               "", "", "server_error")));
            }
            if (job->include_usage) {
              Json j = chunk_base(*job);
              j["choices"] = Json::array();
              j["usage"] = usage_of(*job, st->completion_tokens);
              out += event(j);
            }
            out += "data: [DONE]\n\n";
          }
          // A failed write is a client gone: returning false ends the response
          // and the releaser below cancels the engine requests.
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (all_done) sink.done();
          return true;
        },
        [this, job](bool /*success*/) {
          bool unfinished = false;
          {
            std::lock_guard lock(job->m);
            unfinished = job->unfinished > 0;
          }
          if (unfinished) cancel_job(*job, "the client disconnected");
          unregister_job(job);
        });
  }

  // ---- other endpoints -------------------------------------------------------------

  Json model_card() const {
    Json m = Json::object();
    m["id"] = opt.served_model_name;
    m["object"] = "model";
    m["created"] = created;
    m["owned_by"] = "fp8lm";
    m["root"] = opt.model_dir.string();
    m["parent"] = nullptr;
    m["max_model_len"] = opt.max_model_len;
    return m;
  }

  // vLLM's POST /tokenize: {count, max_model_len, tokens, token_strs}.
  Json tokenize(const Json& body) const {
    const TokenizeRequest t = parse_tokenize_request(body);
    check_model(t.model);
    if (opt.skip_tokenizer_init) throw ApiError(400, std::string(kNoTokenizer) + ": /tokenize needs one");
    const std::string text = t.chat ? render_chat(t.chat_request) : t.prompt;
    // The bounds of a completion's prompt: at most the context's tokens, refused
    // while tokenizing (a longer text costs no more than its own bytes), so the
    // answer (ids and token_strs) is bounded by the context too.
    const auto ids = rt.tokenizer().encode_at_most(text, t.add_special_tokens, size_t(opt.max_model_len));
    if (!ids) {
      const char* param = t.chat ? "messages" : "prompt";
      throw ApiError(400,
                     "/tokenize counts up to the model's context of " + std::to_string(opt.max_model_len) +
                         " tokens (--max-model-len); this " + param + " has more",
                     param, "context_length_exceeded");
    }
    Json out = Json::object();
    out["count"] = ids->size();
    out["max_model_len"] = opt.max_model_len;
    out["tokens"] = *ids;
    if (t.return_token_strs) {
      Json strs = Json::array();
      for (const uint32_t id : *ids) strs.push_back(rt.tokenizer().id_to_token(id).value_or(""));
      out["token_strs"] = strs;
    } else {
      out["token_strs"] = nullptr;
    }
    return out;
  }

  // vLLM's POST /detokenize: {prompt}.
  Json detokenize(const Json& body) const {
    const DetokenizeRequest d = parse_detokenize_request(body, opt.max_model_len);
    check_model(d.model);
    if (opt.skip_tokenizer_init) throw ApiError(400, std::string(kNoTokenizer) + ": /detokenize needs one");
    const int64_t vocab = rt.model().vocab_size();
    std::vector<uint32_t> ids;
    for (const int32_t id : d.tokens) {
      if (id >= vocab)
        throw ApiError(400, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                std::to_string(vocab), "tokens");
      ids.push_back(uint32_t(id));
    }
    return Json{{"prompt", rt.tokenizer().decode(ids, /*skip_special_tokens=*/false)}};
  }

  std::string render_metrics() const {
    EngineGauges g;
    g.running = engine->num_running();
    g.waiting = engine->num_waiting();
    const int64_t total = engine->kv_blocks_total();
    g.kv_cache_usage = total > 0 ? double(engine->kv_blocks_used()) / double(total) : 0.0;
    g.preemptions = engine->num_preemptions();
    g.prefix_cache_queries = engine->prefix_cache_queries();
    g.prefix_cache_hits = engine->prefix_cache_hits();
    if (engine->speculative_config()) {
      const engine::SpeculativeStats st = engine->speculative_stats();
      g.speculative = true;
      g.spec_drafts = st.steps;
      g.spec_draft_tokens = st.drafted;
      g.spec_accepted_tokens = st.accepted;
      g.spec_accepted_per_pos = st.accepted_at;
    }
    if (grammars) {
      const structured::GrammarCompiler::Stats st = grammars->stats();
      g.structured = true;
      g.grammar_compilations = st.compilations;
      g.grammar_cache_hits = st.cache_hits;
      g.grammar_failures = st.failures;
      g.grammar_compile_seconds = st.compile_seconds;
      g.grammar_cache_bytes = st.cached_bytes;
      g.grammar_worker_starts = grammars->worker_starts();
    }
    return metrics.render(g, opt.served_model_name);
  }

  // Runs `body`, turning every exception into an OpenAI error response.
  template <typename F>
  void guarded(httplib::Response& res, F&& body) {
    try {
      body();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, ApiError(400, e.what()));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fp8lm: internal error handling a request: %s\n", e.what());
      send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "", "server_error"));
    }
  }

  // httplib's pattern for a route of the table; throws for a route the table
  // lacks (a handler whose exposure nobody decided) and checks, once every
  // route is registered, that none of the table's is missing (routes()).
  std::string registered_pattern(std::string_view method, std::string_view path) {
    const Route* r = find_route(method, path);
    if (r == nullptr || r->path != path)
      throw Error("internal: the route " + std::string(method) + " " + std::string(path) +
                  " is not in server/routes.h's table");
    ++registered_routes;
    const size_t brace = path.find('{');
    return brace == std::string_view::npos ? std::string(path) : std::string(path.substr(0, brace)) + "(.+)";
  }

  void routes() {
    // Before any handler and any body byte: the route table (server/routes.h)
    // decides who may call what, and what a body must be.
    http->set_request_filter([this](const httplib::Request& req, httplib::Response& res) {
      const Route* route = find_route(req.method, req.path);
      if (!opt.api_key.empty() && (route == nullptr || !route->open)) {
        const std::string auth = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), opt.api_key)) {
          send_error(res, ApiError(401,
                                   auth.empty() ? "You didn't provide an API key: send it as 'Authorization: Bearer KEY'."
                                                : "Incorrect API key provided.",
                                   "", "invalid_api_key"));
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      // A JSON route takes JSON alone: a web page may post text/plain (or a form)
      // to a local server without a CORS preflight, application/json it may not.
      const std::string given = route != nullptr && route->json_body ? req.get_header_value("Content-Type") : "";
      if (route != nullptr && route->json_body && !is_json_content_type(given)) {
        send_error(res, ApiError(415,
                                 std::string(route->path) + " takes a JSON body: send it with 'Content-Type: "
                                 "application/json'" + (given.empty() ? std::string(" (none was given)")
                                                                      : " (not '" + given.substr(0, 100) + "')"),
                                 "", "unsupported_media_type"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http->set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      const std::string what = req.method + " " + req.path;
      if (res.status == 404) send_error(res, ApiError(404, "Not found: " + what, "", "not_found"));
      else if (res.status == 413) send_error(res, ApiError(413, "the request body is too large"));
      else send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status) + " for " + what));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      std::fprintf(stderr, "fp8lm: internal error handling a request: %s\n", what.c_str());
      send_error(res, ApiError(500, "internal error: " + what, "", "", "server_error"));
    });

    // Each route as the table names it, and none that it does not.
    const auto get = [this](std::string_view path, httplib::Server::Handler h) {
      http->Get(registered_pattern("GET", path), std::move(h));
    };
    const auto post = [this](std::string_view path, httplib::Server::HandlerWithContentReader h) {
      http->Post(registered_pattern("POST", path), std::move(h));
    };
    get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (stopping) send_error(res, shutting_down());
      else send_json(res, Json{{"status", "ok"}});
    });
    get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, Json{{"object", "list"}, {"data", Json::array({model_card()})}});
    });
    get("/v1/models/{model}", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        const std::string name = req.matches[1];
        if (name != opt.served_model_name) check_model(name);
        send_json(res, model_card());
      });
    });
    get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(render_metrics(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // The body is read by the transport, within its limits (http_transport.h).
    const auto generate = [this](Endpoint endpoint) {
      return [this, endpoint](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
        httplib::Request with_body = req;  // handle_generate reads req.body
        if (!http->read_body(reader, with_body.body, res)) return;
        guarded(res, [&] { handle_generate(with_body, res, endpoint); });
      };
    };
    post("/v1/completions", generate(Endpoint::kCompletions));
    post("/v1/chat/completions", generate(Endpoint::kChat));
    // vLLM's side endpoints (the body read within the same limits).
    const auto json_post = [this](Json (Impl::*handler)(const Json&) const) {
      return [this, handler](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
        std::string text;
        if (!http->read_body(reader, text, res)) return;
        guarded(res, [&] { send_json(res, (this->*handler)(parse_body(text))); });
      };
    };
    post("/tokenize", json_post(&Impl::tokenize));
    post("/detokenize", json_post(&Impl::detokenize));
    get("/version", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, Json{{"version", opt.version}});
    });
    // fp8lm's own: the served model's FP8 configuration, for the chat page (behind --api-key, as /v1 is).
    get("/v1/fp8lm/model", [this](const httplib::Request&, httplib::Response& res) {
      guarded(res, [&] {
        ServedModelFacts f;
        f.served_model_name = opt.served_model_name;
        f.max_model_len = opt.max_model_len;
        f.kv_cache_tokens = cache_tokens;
        f.reasoning = opt.reasoning;
        f.tool_call_parser = opt.tool_call_parser;
        f.defaults = defaults;
        f.defaults_source = opt.generation_defaults.source.string();
        send_json(res, model_info_json(rt, f));
      });
    });
    // The chat page (server/chat_page.h): public, so a browser can load it before it knows the
    // API key; it asks for the key when the API answers 401. The policy keeps it to this server.
    get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = chat_page_html();
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                     "frame-ancestors 'none'");
    });
  }
};

Server::Server(engine::Runtime& runtime, ServerOptions options)
    : impl_(std::make_unique<Impl>(runtime, std::move(options))) {
  Impl& s = *impl_;
  ServerOptions& o = s.opt;
  if (!o.skip_tokenizer_init && !runtime.has_tokenizer())
    throw Error(o.model_dir.string() +
                " has no tokenizer.json (--load-format dummy loads config.json alone): serve it with "
                "--skip-tokenizer-init (prompts as token ids, token ids out)");
  const int64_t context = runtime.config().max_position_embeddings;
  if (o.max_model_len < 0) throw Error("--max-model-len: " + std::to_string(o.max_model_len) + " is negative");
  if (o.max_model_len > context)
    throw Error("--max-model-len: " + std::to_string(o.max_model_len) + " is beyond the model's context of " +
                std::to_string(context) + " tokens");
  if (o.max_model_len == 0) o.max_model_len = context;
  o.scheduler.validate();
  if (o.max_waiting < 0) throw Error("--max-waiting: " + std::to_string(o.max_waiting) + " is negative");
  if (o.max_waiting == 0) o.max_waiting = 4 * o.scheduler.max_num_seqs;
  if (o.port < 0 || o.port > 65535) throw Error("--port: " + std::to_string(o.port) + " is not a TCP port");
  if (o.served_model_name.empty()) throw Error("--served-model-name: must not be empty");
  s.cache_tokens = runtime.blocks().num_total() * runtime.block_size();

  try {
    if (o.skip_tokenizer_init) {
      if (!o.chat_template.empty()) throw Error("--chat-template: needs a tokenizer, and --skip-tokenizer-init is given");
      s.chat_template_error = std::string(kNoTokenizer) + ": /v1/chat/completions needs one to render messages; "
                              "send token ids to /v1/completions";
    } else if (!o.chat_template.empty()) {
      std::ifstream in(o.chat_template, std::ios::binary);
      if (!in) throw Error("--chat-template: cannot read " + o.chat_template.string());
      std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const tokenizer::Tokenizer& tok = runtime.tokenizer();
      s.chat_template = std::make_unique<chat::ModelChatTemplate>(
          std::map<std::string, std::string>{{"default", src}}, tok.bos() ? tok.bos()->content : std::string(),
          tok.eos() ? tok.eos()->content : std::string());
    } else {
      s.chat_template = std::make_unique<chat::ModelChatTemplate>(chat::ModelChatTemplate::load(o.model_dir));
    }
  } catch (const Error& e) {
    if (!o.chat_template.empty()) throw;
    s.chat_template_error = std::string("this model has no chat template, so /v1/chat/completions cannot render "
                                        "messages (give one with --chat-template): ") + e.what();
  }
  std::string eos_warning;
  s.extra_eos = engine::further_eos_ids(o.model_dir, runtime.eos_ids(), eos_warning);
  if (!eos_warning.empty()) std::fprintf(stderr, "fp8lm: warning: %s\n", eos_warning.c_str());
  s.defaults = engine::with_generation_defaults(engine::SamplingParams{}, o.generation_defaults);
  s.defaults.validate();

  s.engine = std::make_unique<engine::Engine>(runtime, o.scheduler, o.speculative, o.drafter);
  if (!o.skip_tokenizer_init)
    s.grammars = std::make_unique<GrammarPool>(runtime.tokenizer(), o.model_dir / "tokenizer.json",
                                               runtime.model().vocab_size(), runtime.eos_ids(), o.structured_outputs);
  TransportLimits limits;
  // A request holds a handler thread while its body is read and it runs (a
  // stream until its end): room for every running request and more; further
  // requests wait, heads complete, until one frees.
  limits.handler_threads = size_t(std::clamp<int64_t>(o.scheduler.max_num_seqs + 64, 64, 1024));
  limits.header_timeout = whole_ms(o.header_timeout, "--header-timeout");
  limits.body_timeout = whole_ms(o.body_timeout, "--body-timeout");
  if (!(o.shutdown_timeout >= 0 && o.shutdown_timeout <= 86400))
    throw Error("--shutdown-timeout: " + std::to_string(o.shutdown_timeout) + " seconds; it must be 0 to 86400");
  s.http = std::make_unique<HttpTransport>(limits, [](int status, const std::string& message) {
    return dump(error_body(ApiError(status, message)));
  });
  s.routes();
  if (s.registered_routes != kRoutes.size())
    throw Error("internal: " + std::to_string(s.registered_routes) + " routes registered, server/routes.h lists " +
                std::to_string(kRoutes.size()));
}

Server::~Server() {
  stop_now();
  Impl& s = *impl_;
  if (s.http) s.http->stop();
  {
    std::lock_guard lock(s.loop_m);
    s.engine_quit = true;
  }
  s.loop_cv.notify_all();
  if (s.engine_thread.joinable()) s.engine_thread.join();
}

int Server::bind() {
  Impl& s = *impl_;
  int port = s.opt.port;
  port = s.http->bind(s.opt.host, port);
  if (port < 0)
    throw Error("cannot listen on " + s.opt.host + (s.opt.port == 0 ? " (any port)" : ":" + std::to_string(s.opt.port)) +
                " (in use, or not an address of this machine; --host / --port)");
  s.bound = true;
  s.opt.port = port;
  return port;
}

void Server::serve() {
  Impl& s = *impl_;
  if (!s.bound) bind();
  s.engine_thread = std::thread([&s] { s.engine_loop(); });
  if (!s.opt.quiet)
    std::fprintf(stderr, "fp8lm: serving %s as '%s' on http://%s:%d (max %lld running, %lld waiting; context %lld%s%s)\n",
                 s.opt.model_dir.string().c_str(), s.opt.served_model_name.c_str(), s.opt.host.c_str(), s.opt.port,
                 static_cast<long long>(s.opt.scheduler.max_num_seqs), static_cast<long long>(s.opt.max_waiting),
                 static_cast<long long>(s.opt.max_model_len),
                 s.opt.scheduler.enable_prefix_caching ? "; prefix caching" : "",
                 s.opt.skip_tokenizer_init ? "; no tokenizer: token ids in and out" : "");
  if (!s.opt.quiet) {
    const io::GenerationDefaults& g = s.opt.generation_defaults;
    std::fprintf(stderr, "fp8lm: requests' sampling defaults: %s; request fields override them\n",
                 g.empty() ? "OpenAI's (temperature 1, no top-k / top-p / min-p)"
                           : (g.source.string() + " (" + g.describe() + ")").c_str());
  }
  s.http->start();
  {
    std::unique_lock lock(s.stop_m);
    s.stop_cv.wait(lock, [&] { return s.stopping.load(); });
  }
  // A request still compiling its constraint could not be queued now (register_job refuses it):
  // its compilation ends here rather than at its --structured-outputs-timeout.
  if (s.grammars) s.grammars->stop();
  s.drain();
  s.http->stop();  // every request answered: no more connections
  {
    std::lock_guard lock(s.loop_m);
    s.engine_quit = true;
  }
  s.loop_cv.notify_all();
  s.engine_thread.join();
}

void Server::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.stop_m);
    s.stopping = true;
  }
  s.stop_cv.notify_all();
}

void Server::stop_now() {
  Impl& s = *impl_;
  stop();
  {
    std::lock_guard lock(s.jobs_m);
    s.stop_now_called = true;
  }
  s.jobs_cv.notify_all();
}

}  // namespace fp8lm::server
