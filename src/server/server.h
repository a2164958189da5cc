// `fp8lm serve`: an OpenAI-compatible HTTP server over the batched engine.
//
// Threads: one engine thread loops on Engine::step() while there is work and
// sleeps on a condition variable when idle; HTTP handler threads (cpp-httplib's
// pool) parse and check a request, add one engine request per choice, then wait
// on the request's own event queue, which the engine's callbacks fill. A
// non-streaming handler answers when every choice finished; a streaming one
// writes server-sent events as outputs arrive. Both watch the connection while
// they have nothing to write (HttpTransport::client_gone): when the client goes
// away (the connection closed, or a write fails) its engine requests are
// cancelled, so their KV blocks are freed at the next step — queued ones too.
// Connections, limits and deadlines: server/http_transport.h.
//
// Shutdown (SIGTERM / SIGINT) is a drain: stop() makes new requests and
// /health answer 503 and lets the requests in flight finish for up to
// shutdown_timeout; then (or at stop_now(), a second signal) what is left is
// cancelled — a stream writes an error event and `data: [DONE]`, any other
// request gets a whole 503 — and serve() returns once every response is written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "engine/runtime.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "io/generation_config.h"
#include "server/grammar_pool.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace fp8lm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (bind() says which)
  std::string api_key;                   // empty: no authentication
  std::string served_model_name;         // the name clients ask for
  std::filesystem::path model_dir;       // for /v1/models and generation_config.json
  std::string version;                   // GET /version
  int64_t max_model_len = 0;             // 0: the model's context
  int64_t max_waiting = 0;               // requests waiting before 503s; 0: 4 × max_num_seqs
  engine::SchedulerConfig scheduler;
  std::optional<engine::SpeculativeConfig> speculative;  // --speculative-config; none: no drafts
  engine::Drafter* drafter = nullptr;  // a draft model's (outlives the server); null: the n-gram drafter
  // Requests' default sampling parameters: the sampling fields of this generation config
  // (io::read_generation_config; --generation-config) over OpenAI's defaults; empty: OpenAI's.
  io::GenerationDefaults generation_defaults;
  ReasoningParser reasoning = ReasoningParser::kNone;
  ToolCallParser tool_call_parser = ToolCallParser::kNone;  // chat requests' tool calls (server/tool_calls.h)
  std::filesystem::path chat_template;   // a .jinja file instead of the model's template; empty: the model's
  bool quiet = false;                    // no startup lines on stderr
  // vLLM's --skip-tokenizer-init: no tokenizer is used (a --load-format dummy
  // model has none). Prompts come as token ids, choices carry `token_ids` and
  // empty text, logprob tokens read "token_id:N"; chat and stop strings, which
  // need text, are refused with 400.
  bool skip_tokenizer_init = false;
  double shutdown_timeout = 30;  // seconds requests in flight may finish after stop(); 0: cancel them at once
  double header_timeout = 20;    // seconds for a request's head to arrive (else 408)
  double body_timeout = 60;      // seconds for its body to arrive after the head (else 408)
  // Structured outputs: the compile threads, their time bound and cache (server/grammar_pool.h).
  GrammarPoolOptions structured_outputs;
};

class Server {
 public:
  // `runtime` must outlive the server. Throws fp8lm::Error for bad options.
  Server(engine::Runtime& runtime, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws fp8lm::Error when it cannot.
  int bind();
  // Serves until stop(); drains; returns when every handler and the engine thread ended.
  void serve();
  // Begins the graceful shutdown. From any thread (not a signal handler), any number of times.
  void stop();
  // The shutdown without waiting: requests in flight are cancelled now (each still answered).
  void stop_now();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8lm::server
