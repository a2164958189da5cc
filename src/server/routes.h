// Every route of `fp8lm serve`, decided once: who may call it, what body it
// takes, and the bounds on what it does. The request filter reads this table
// (the API key, the Content-Type of a body), Server registers a handler for
// each entry and for nothing else (it refuses to start otherwise), and
// docs/reliability.md prints it (test_server_api checks that the two agree).
// A path that is not here gets the key check too, before its 404: with
// --api-key, only the routes marked open answer without it.
#pragma once

#include <array>
#include <string_view>

namespace fp8lm::server {

struct Route {
  std::string_view method;  // "GET" (HEAD too) or "POST"
  std::string_view path;    // exact, or ending in "{name}": any non-empty rest
  bool open;                // callable without the key when --api-key is given
  bool json_body;           // takes a JSON body: Content-Type application/json, else 415
  std::string_view bounds;  // what bounds a call, as the docs print it
};

inline constexpr std::array<Route, 11> kRoutes = {{
    {"POST", "/v1/completions", false, true,
     "body 64 MiB, nesting 128; prompt tokens + max_tokens ≤ context; n × prompts ≤ --max-waiting; "
     "the expansion ≤ 256 MiB"},
    {"POST", "/v1/chat/completions", false, true,
     "as completions; the chat template's work, output and values bounded; JSON in strings nests ≤ 128"},
    {"POST", "/tokenize", false, true, "body 64 MiB; the tokens ≤ the context (--max-model-len), else 400"},
    {"POST", "/detokenize", false, true, "body 64 MiB; the ids ≤ the context (--max-model-len), else 400"},
    {"GET", "/v1/models", false, false, "a fixed answer"},
    {"GET", "/v1/models/{model}", false, false, "a fixed answer"},
    {"GET", "/v1/fp8lm/model", false, false, "a fixed answer"},
    {"GET", "/version", false, false, "a fixed answer"},
    {"GET", "/health", true, false, "a fixed answer (200, or 503 while shutting down)"},
    {"GET", "/metrics", true, false, "counters and gauges: load, not content"},
    {"GET", "/", true, false, "the chat page: static HTML compiled in"},
}};

// The route a request's method and path (without the query) name; nullptr for
// none. HEAD finds the GET route.
const Route* find_route(std::string_view method, std::string_view path);

// Whether a Content-Type header says JSON: application/json, any case, with
// parameters (charset=utf-8) or without.
bool is_json_content_type(std::string_view content_type);

}  // namespace fp8lm::server
