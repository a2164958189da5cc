// `fp8lm serve MODEL`: an OpenAI-compatible HTTP server (server/server.h) over
// the batched engine — /v1/completions, /v1/chat/completions (streaming or
// not), /v1/models, /health, /metrics. The model and run flags are generate's;
// the server's own flags follow vLLM's names. SIGINT / SIGTERM stop it
// gracefully: requests in flight may finish for --shutdown-timeout seconds, a
// second signal cancels them at once (each still gets its answer), exit 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "engine/block_allocator.h"
#include "engine/runtime.h"
#include "io/model_spec.h"
#include "server/server.h"

namespace fp8lm::cli {
namespace {

struct ServeFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  SchedulerFlags scheduler;
  int64_t max_num_batched_tokens = 0;  // 0: max(2048, --max-num-seqs)
  int64_t max_waiting = 0;
  std::string reasoning_parser;
  std::string tool_call_parser;
  std::string chat_template;
  bool skip_tokenizer_init = false;
  std::string generation_config = "auto";
  std::string speculative_config;  // vLLM's --speculative-config JSON; empty: none
  double shutdown_timeout = server::ServerOptions{}.shutdown_timeout;
  double header_timeout = server::ServerOptions{}.header_timeout;
  double body_timeout = server::ServerOptions{}.body_timeout;
  server::GrammarPoolOptions structured_outputs;
};

// SIGINT / SIGTERM are blocked in every thread and taken by this one, which
// stops the server (never from a signal handler: stop() takes locks): the
// first signal drains, any later one cancels what is still in flight.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any other thread exists: all inherit it
    signal(SIGPIPE, SIG_IGN);                    // a client gone: a failed write, not a dead server
    thread_ = std::thread([this] {
      const timespec tick{0, 100'000'000};
      while (!done_) {
        const int sig = sigtimedwait(&set_, nullptr, &tick);
        if (sig < 0) continue;
        const int n = ++got_;
        std::fprintf(stderr, "\nfp8lm: %s: %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                     n == 1 ? "stopping the server" : "cancelling the requests in flight");
        std::lock_guard lock(m_);
        if (server_ != nullptr) apply(*server_);
      }
    });
  }
  ~SignalWatcher() {
    done_ = true;
    thread_.join();
  }
  void attach(server::Server* s) {
    std::lock_guard lock(m_);
    server_ = s;
    if (s != nullptr) apply(*s);
  }
  bool signalled() const { return got_ > 0; }

 private:
  void apply(server::Server& s) const {
    if (got_ == 1) s.stop();
    if (got_ > 1) s.stop_now();
  }

  sigset_t set_{};
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::atomic<int> got_{0};
  std::mutex m_;
  server::Server* server_ = nullptr;
};

void run(const ModelFlags& mf, const RunFlags& rf, const ServeFlags& sf) {
  server::ServerOptions o;
  o.host = sf.host;
  o.port = sf.port;
  o.api_key = sf.api_key;
  o.model_dir = mf.model;
  o.version = FP8LM_VERSION;
  o.served_model_name = sf.served_model_name;
  if (o.served_model_name.empty()) {
    std::filesystem::path p = std::filesystem::path(mf.model).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    o.served_model_name = p.filename().string();
    if (o.served_model_name.empty() || o.served_model_name == ".") o.served_model_name = mf.model;
  }
  if (sf.scheduler.max_num_seqs < 1)
    throw Error("--max-num-seqs: " + std::to_string(sf.scheduler.max_num_seqs) + " must be at least 1");
  o.scheduler.max_num_seqs = sf.scheduler.max_num_seqs;
  o.scheduler.max_num_batched_tokens =
      sf.max_num_batched_tokens > 0 ? sf.max_num_batched_tokens
                                    : std::max(engine::SchedulerConfig{}.max_num_batched_tokens, o.scheduler.max_num_seqs);
  if (o.scheduler.max_num_batched_tokens < o.scheduler.max_num_seqs)
    throw Error("--max-num-batched-tokens: " + std::to_string(o.scheduler.max_num_batched_tokens) +
                " must be at least --max-num-seqs (" + std::to_string(o.scheduler.max_num_seqs) + ")");
  o.scheduler.enable_prefix_caching = sf.scheduler.enable_prefix_caching;
  o.scheduler.async_scheduling = sf.scheduler.async_scheduling;
  o.generation_defaults = generation_defaults(sf.generation_config, mf.model);
  o.scheduler.validate();
  o.speculative = speculative_config(sf.speculative_config);  // refused by name before the model loads
  if (rf.max_model_len < 0) throw Error("--max-model-len: " + std::to_string(rf.max_model_len) + " is negative");
  if (sf.max_waiting < 0) throw Error("--max-waiting: " + std::to_string(sf.max_waiting) + " is negative");
  o.max_model_len = rf.max_model_len;
  o.max_waiting = sf.max_waiting;
  o.reasoning = server::parse_reasoning_parser(sf.reasoning_parser);
  o.tool_call_parser = server::parse_tool_call_parser(sf.tool_call_parser);
  o.chat_template = sf.chat_template;
  o.skip_tokenizer_init = sf.skip_tokenizer_init;
  o.shutdown_timeout = sf.shutdown_timeout;
  o.header_timeout = sf.header_timeout;
  o.body_timeout = sf.body_timeout;
  o.structured_outputs = sf.structured_outputs;
  o.structured_outputs.validate();  // refused by name before the model loads

  engine::RuntimeOptions options = rf.options();
  options.max_num_seqs = o.scheduler.max_num_seqs;
  options.max_num_batched_tokens = o.scheduler.max_num_batched_tokens;
  const io::LoadOverrides overrides = mf.overrides();
  // The runtime sizes the KV cache (on the CPU from the host memory available, for --max-num-seqs
  // sequences of --max-model-len) and may lower the model's context to what it holds.
  options.max_model_len = o.max_model_len;

  SignalWatcher signals;
  auto [draft, rt] = load_target_and_draft(mf.model, overrides, options, o.speculative);
  o.drafter = draft.get();
  o.max_model_len = rt->max_model_len();
  print_load_summary(*rt, rf);
  if (signals.signalled()) return;
  server::Server srv(*rt, o);
  const int port = srv.bind();
  o.port = port;
  signals.attach(&srv);
  srv.serve();
  signals.attach(nullptr);
  std::fprintf(stderr, "fp8lm: server stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto mf = add_model_flags(cmd);
  auto rf = add_run_flags(cmd);
  add_max_model_len_flag(cmd, *rf);
  auto sf = std::make_shared<ServeFlags>();
  add_scheduler_flags(cmd, sf->scheduler, "usage reports prompt_tokens_details.cached_tokens");
  cmd->add_option("--host", sf->host, "Address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)");
  cmd->add_option("--port", sf->port, "TCP port (default 8000; 0 = any free port, printed at start)");
  cmd->add_option("--api-key", sf->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (also from $FP8LM_API_KEY)")
      ->envname("FP8LM_API_KEY");
  cmd->add_option("--served-model-name", sf->served_model_name,
                  "The model name clients ask for (default: the model directory's name)");
  cmd->add_option("--max-num-batched-tokens", sf->max_num_batched_tokens,
                  "Tokens per engine step (default max(2048, --max-num-seqs)); long prompts are prefilled in chunks");
  cmd->add_option("--max-waiting", sf->max_waiting,
                  "Requests waiting for a slot before new ones get 503 (default 4 × --max-num-seqs)");
  cmd->add_option("--reasoning-parser", sf->reasoning_parser,
                  "qwen3 or deepseek_r1: chat text between <think> and </think> goes to reasoning_content");
  cmd->add_option("--tool-call-parser", sf->tool_call_parser,
                  "hermes, llama3_json or qwen3: chat requests with tools get the calls in the output as tool_calls");
  cmd->add_option("--chat-template", sf->chat_template, "A Jinja chat template file instead of the model's");
  cmd->add_option("--generation-config", sf->generation_config,
                  "Requests' default sampling parameters: auto (the model's generation_config.json, the default), "
                  "fp8lm (OpenAI's defaults), or a directory holding a generation_config.json");
  add_speculative_config_flag(cmd, sf->speculative_config);
  cmd->add_flag("--skip-tokenizer-init", sf->skip_tokenizer_init,
                "Use no tokenizer (a --load-format dummy model has none): prompts as token ids, choices with "
                "token_ids and empty text; chat and stop strings are refused");
  cmd->add_option("--shutdown-timeout", sf->shutdown_timeout,
                  "Seconds requests in flight may finish after SIGTERM/SIGINT before they are cancelled (default 30; "
                  "0: at once; a second signal also cancels them at once)");
  cmd->add_option("--header-timeout", sf->header_timeout,
                  "Seconds a client has to send a request's headers, from connecting or from its first byte on a "
                  "kept-alive connection (default 20; then 408)");
  cmd->add_option("--body-timeout", sf->body_timeout,
                  "Seconds a client has to send a request's body after its headers (default 60; then 408)");
  cmd->add_option("--structured-outputs-threads", sf->structured_outputs.threads,
                  "Threads compiling requests' JSON schemas, regexes and grammars, each in a worker process of its "
                  "own (default 2)");
  cmd->add_option("--structured-outputs-timeout", sf->structured_outputs.timeout_seconds,
                  "Seconds a request's constraint may take to compile, waiting for a thread included (default 30; "
                  "then 400, and the compilation is ended)");
  cmd->add_option("--structured-outputs-memory", sf->structured_outputs.memory_mib,
                  "MiB one compilation may take, writing its result for the server included: each of "
                  "--structured-outputs-threads compiles in a process of its own, bounded to this beyond the "
                  "vocabulary it holds (default 2048, 16 to 1048576; past it the "
                  "request gets a 400 and the process is replaced)");
  cmd->footer(
      "On the CPU without --kv-cache-tokens / --kv-cache-memory, the KV cache takes at most half of the host memory "
      "available and no more than --max-num-seqs sequences of --max-model-len; a model's context it cannot hold "
      "is lowered to what it holds. Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
      "GET /health, GET /metrics (Prometheus). Request bodies: at most 64 MiB after decompression (413); idle "
      "kept-alive connections close after 5 s.");
  cmd->callback([mf, rf, sf] { run(*mf, *rf, *sf); });
}

}  // namespace fp8lm::cli
