// GET /v1/fp8lm/model: what the served model is and how it runs in FP8 — the
// facts `fp8lm inspect` reports about a checkpoint (architecture, the detected
// quantization format, the scheme of each group of linear layers, the KV-cache
// dtype), plus what only the running server knows: the KV cache's per-layer
// formats and scales in use (calibrated at load or read from the checkpoint),
// its size, the weights' bytes on the backend, the load notes, the parsers, and
// the requests' sampling defaults. The chat page (server/chat_page.html) shows
// it; it is fp8lm's own endpoint, not OpenAI's, so it lives under /v1/fp8lm/
// (behind --api-key like the rest of /v1).
#pragma once

#include <cstdint>
#include <string>

#include "engine/runtime.h"
#include "engine/sampler.h"
#include "server/api.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace fp8lm::server {

// What the server adds to the runtime's own facts.
struct ServedModelFacts {
  std::string served_model_name;
  int64_t max_model_len = 0;
  int64_t kv_cache_tokens = 0;        // the KV blocks sequences may use, in tokens
  ReasoningParser reasoning = ReasoningParser::kNone;
  ToolCallParser tool_call_parser = ToolCallParser::kNone;
  engine::SamplingParams defaults;    // requests' sampling defaults
  std::string defaults_source;        // the generation_config.json they came from; empty: OpenAI's
};

// The body of GET /v1/fp8lm/model (object "fp8lm.model"); the field names follow
// `fp8lm inspect --json` where it has the same fact.
Json model_info_json(const engine::Runtime& rt, const ServedModelFacts& facts);

}  // namespace fp8lm::server
