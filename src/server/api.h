// The OpenAI API of `fp8lm serve`, apart from HTTP and the engine: request
// bodies of /v1/completions and /v1/chat/completions parsed and checked (every
// bad parameter named), errors in OpenAI's JSON shape, and the response bodies
// (choices, usage, logprobs in the completions and the chat formats).
// Everything here is pure, so tests/cpp/test_server_api.cpp checks it without
// a model or a socket.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/api_error.h"
#include "structured/grammar_spec.h"

namespace fp8lm::server {

enum class Endpoint : uint8_t { kCompletions, kChat };

// One prompt of /v1/completions: text, or token ids.
struct PromptInput {
  bool is_text = true;
  std::string text;
  std::vector<int32_t> ids;
};

// A request as the client sent it, checked. Sampling fields are in `params`
// except max_tokens, which depends on the prompt (resolve_max_tokens).
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                  // empty: not given (the served model)
  std::vector<PromptInput> prompts;   // completions: one or more
  Json messages = Json::array();      // chat: content flattened to strings
  bool add_generation_prompt = true;  // chat (vLLM's extension)
  Json chat_template_kwargs = Json::object();
  engine::SamplingParams params;      // max_tokens not set here
  std::optional<int64_t> max_tokens;  // max_tokens, or chat's max_completion_tokens
  std::string max_tokens_param = "max_tokens";  // which of the two the client sent (named in errors)
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int32_t logprobs = -1;              // -1: none; else alternatives per token (completions: logprobs, chat: top_logprobs)
  // chat: the tools (OpenAI's [{"type": "function", "function": {name, description, parameters}}]),
  // rendered by the chat template; null: none. With tool_choice "auto" (the default when tools
  // are given) the output's calls are parsed (--tool-call-parser); with "none" they are not.
  Json tools = nullptr;
  bool parse_tool_calls = false;
  // tool_choice "required" (a call of any tool) or named (tool_choice_name's): the output is
  // constrained to calls in the --tool-call-parser's format (tool_call_grammar).
  bool tool_choice_required = false;
  std::string tool_choice_name;
  bool parallel_tool_calls = true;  // OpenAI's: false allows one call at most
  // Structured outputs (server/structured_request.h): what the output is constrained to, and the
  // field that asked (response_format, structured_outputs, tool_choice); none: free text.
  std::optional<structured::GrammarSpec> grammar;
  std::string grammar_param;
};

// POST /tokenize (vLLM's): a text prompt, or chat messages the chat template renders.
struct TokenizeRequest {
  std::string model;               // empty: not given
  bool chat = false;               // messages (chat.messages…) rather than prompt
  std::string prompt;
  ApiRequest chat_request;         // chat: messages, add_generation_prompt, chat_template_kwargs
  bool add_special_tokens = true;  // vLLM's defaults: true for a prompt, false for messages
  bool return_token_strs = false;  // also each token's vocabulary string
};
TokenizeRequest parse_tokenize_request(const Json& body);

// POST /detokenize: token ids back to text.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
// At most `max_tokens` ids (the context), else 400 naming tokens.
DetokenizeRequest parse_detokenize_request(const Json& body, int64_t max_tokens);

inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr int32_t kMaxChoices = 128;

// Throw ApiError(400) naming the parameter for a wrong type or value. Sampling fields the
// request does not give keep their value in `defaults` (the server's: the model's generation
// config over OpenAI's defaults).
ApiRequest parse_completion_request(const Json& body, const engine::SamplingParams& defaults = {});
ApiRequest parse_chat_request(const Json& body, const engine::SamplingParams& defaults = {});

// The max_tokens of one prompt of `prompt_tokens` tokens: as asked, else 16
// for completions (OpenAI's default) and the rest of the context for chat,
// capped by what the KV cache can hold. 400 when the prompt leaves no room,
// or prompt + max_tokens is beyond `max_model_len`.
int32_t resolve_max_tokens(const ApiRequest& r, int64_t prompt_tokens, int64_t max_model_len, int64_t cache_tokens);

// Every choice (prompt × n) becomes an engine request holding its own copy of
// the prompt's ids, the stop strings and the stop ids, so a body's size is
// multiplied by n × prompts. A request may expand to at most this many bytes.
inline constexpr int64_t kMaxExpandedBytes = int64_t(256) << 20;

// The bytes the choices of `r` would hold, with `prompt_tokens[i]` tokens in
// prompt i (the rendered chat for chat requests).
int64_t expanded_bytes(const ApiRequest& r, const std::vector<int64_t>& prompt_tokens);

// 400 naming `n` (or `prompt` when n is 1) when expanded_bytes is beyond
// kMaxExpandedBytes; to be called before the choices are built.
void check_expanded_size(const ApiRequest& r, const std::vector<int64_t>& prompt_tokens);

// ---- responses ---------------------------------------------------------------

// One finished choice.
struct ChoiceResult {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<engine::SampleResult> logprobs;  // one per token when asked for
  std::string finish_reason;                    // "stop" or "length"
};

// Token id -> its text, as `decode([id])` gives it.
using TokenText = std::function<std::string(int32_t)>;

// With `cached_tokens` (prefix caching on): also OpenAI's
// "prompt_tokens_details": {"cached_tokens": N}.
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, std::optional<int64_t> cached_tokens = std::nullopt);

// Completions format: {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
// `offset` is where the first token's text starts in the choice's text (updated).
Json completion_logprobs(const std::vector<engine::SampleResult>& lps, int32_t top_n, const TokenText& text,
                         int64_t& offset);
// Chat format: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs(const std::vector<engine::SampleResult>& lps, int32_t top_n, const TokenText& text);

// -9999 for -inf (JSON has no infinities), as vLLM.
double json_logprob(float lp);

}  // namespace fp8lm::server
