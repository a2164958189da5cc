// `fp8lm serve`: an OpenAI-compatible HTTP server over the batched engine.
//
// Threads: one engine thread loops on Engine::step() while there is work and
// sleeps on a condition variable when idle; HTTP handler threads (cpp-httplib's
// pool) parse and check a request, add one engine request per choice, then wait
// on the request's own event queue, which the engine's callbacks fill. A
// non-streaming handler answers when every choice finished, watching the
// connection meanwhile (server/connection_watch.h); a streaming one writes
// server-sent events as outputs arrive. When the client goes away (the
// connection closed, or a write fails) its engine requests are cancelled, so
// their KV blocks are freed at the next step. stop() (SIGINT/SIGTERM) cancels everything in flight,
// stops accepting, and serve() returns once every handler finished.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/runtime.h"
#include "engine/scheduler.h"
#include "server/reasoning.h"

namespace fp8lm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (bind() says which)
  std::string api_key;                   // empty: no authentication
  std::string served_model_name;         // the name clients ask for
  std::filesystem::path model_dir;       // for /v1/models and generation_config.json
  int64_t max_model_len = 0;             // 0: the model's context
  int64_t max_waiting = 0;               // requests waiting before 503s; 0: 4 × max_num_seqs
  engine::SchedulerConfig scheduler;
  ReasoningParser reasoning = ReasoningParser::kNone;
  std::filesystem::path chat_template;   // a .jinja file instead of the model's template; empty: the model's
  bool quiet = false;                    // no startup lines on stderr
  // vLLM's --skip-tokenizer-init: no tokenizer is used (a --load-format dummy
  // model has none). Prompts come as token ids, choices carry `token_ids` and
  // empty text, logprob tokens read "token_id:N"; chat and stop strings, which
  // need text, are refused with 400.
  bool skip_tokenizer_init = false;
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
  // Serves until stop(); returns when every handler and the engine thread ended.
  void serve();
  // From any thread (not a signal handler), any number of times.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8lm::server
