// The OpenAI API layer of `fp8lm serve` (src/server/api.h, reasoning.h,
// metrics.h) without HTTP: every request shape both endpoints accept, every
// bad parameter refused with a 400 that names it, the error body's shape,
// max_tokens against the context, the response formats of logprobs, the
// <think> split in whole texts and in every streaming split, the Prometheus
// text; and the engine's per-token logprobs the API reports.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/reasoning.h"
#include "server/routes.h"

namespace fp8lm::test {
namespace {

using server::ApiError;
using server::ApiRequest;
using server::Json;

Json body(const std::string& text) { return server::parse_body(text); }

// The ApiError a call throws (fails the test when it throws none).
template <typename F>
ApiError error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "none");
}

ApiError completion_error(const std::string& text) {
  return error_of([&] { server::parse_completion_request(body(text)); });
}
ApiError chat_error(const std::string& text) {
  return error_of([&] { server::parse_chat_request(body(text)); });
}

// ---- bodies and errors ----------------------------------------------------------

TEST(ServerApi, BodyMustBeAJsonObject) {
  for (const char* bad : {"", "{", "{\"prompt\": }", "[1, 2]", "\"text\"", "42", "{\"a\": 1} trailing",
                          "{\"prompt\": 1e999}", "{\"prompt\": \"\xff\"}"}) {
    const ApiError e = error_of([&] { server::parse_body(bad); });
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_EQ(e.type(), "invalid_request_error");
  }
  EXPECT_TRUE(server::parse_body("{\"prompt\": \"x\"}").is_object());
}

TEST(ServerApi, ErrorBodyHasOpenAIsShape) {
  const Json b = server::error_body(ApiError(400, "temperature must be >= 0", "temperature"));
  ASSERT_TRUE(b.contains("error"));
  const Json& e = b["error"];
  EXPECT_EQ(e["message"], "temperature must be >= 0");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "temperature");
  EXPECT_TRUE(e["code"].is_null());
  const Json auth = server::error_body(ApiError(401, "no key", "", "invalid_api_key"));
  EXPECT_TRUE(auth["error"]["param"].is_null());
  EXPECT_EQ(auth["error"]["code"], "invalid_api_key");
  EXPECT_EQ(auth["error"]["type"], "authentication_error");
  EXPECT_EQ(ApiError(404, "x").type(), "invalid_request_error");
  EXPECT_EQ(ApiError(500, "x").type(), "server_error");
  // Field order as OpenAI's.
  std::vector<std::string> keys;
  for (auto it = e.begin(); it != e.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"message", "type", "param", "code"}));
}

TEST(ServerApi, DumpNeverThrowsOnBadUtf8) {
  Json j = Json::object();
  j["text"] = std::string("ok \xff\xfe end");
  std::string out;
  EXPECT_NO_THROW(out = server::dump(j));
  EXPECT_NE(out.find("ok "), std::string::npos);
  EXPECT_NE(out.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
}

// ---- /v1/completions -------------------------------------------------------------

TEST(ServerApi, CompletionPromptShapes) {
  ApiRequest r = server::parse_completion_request(body(R"({"model": "m", "prompt": "Once upon"})"));
  EXPECT_EQ(r.endpoint, server::Endpoint::kCompletions);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].text, "Once upon");

  r = server::parse_completion_request(body(R"({"prompt": ["a", "b", "c"]})"));
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[2].text, "c");
  EXPECT_TRUE(r.model.empty());

  r = server::parse_completion_request(body(R"({"prompt": [5, 6, 7]})"));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{5, 6, 7}));

  r = server::parse_completion_request(body(R"({"prompt": [[1, 2], [3]]})"));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{3}));

  r = server::parse_completion_request(body(R"({"prompt": ["text", [9, 10]]})"));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_FALSE(r.prompts[1].is_text);
}

// The server's defaults (the model's generation config over OpenAI's) fill only what a request
// leaves out.
TEST(ServerApi, RequestFieldsOverTheGenerationDefaults) {
  io::GenerationDefaults g;
  g.source = "generation_config.json";
  g.temperature = 0.8;
  g.top_p = 0.95;
  g.top_k = 50;
  const engine::SamplingParams defaults = engine::with_generation_defaults(engine::SamplingParams{}, g);
  ApiRequest r = server::parse_completion_request(body(R"({"prompt": "a"})"), defaults);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.8f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.95f);
  EXPECT_EQ(r.params.top_k, 50);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.0f);
  r = server::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 0,
                                          "top_k": -1})"), defaults);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.95f);
  EXPECT_EQ(r.params.top_k, -1);
  // Without defaults: OpenAI's.
  r = server::parse_completion_request(body(R"({"prompt": "a"})"));
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);
  EXPECT_EQ(r.params.top_k, 0);
  // do_sample false: greedy whatever the temperature.
  g.do_sample = false;
  EXPECT_TRUE(engine::with_generation_defaults(engine::SamplingParams{}, g).greedy());
}

TEST(ServerApi, CompletionPromptErrorsNameThePrompt) {
  for (const char* bad : {R"({})", R"({"prompt": null})", R"({"prompt": 5})", R"({"prompt": []})",
                          R"({"prompt": [[]]})", R"({"prompt": [1, "a"]})", R"({"prompt": [-1]})",
                          R"({"prompt": [1.5]})", R"({"prompt": [{"a": 1}]})", R"({"prompt": [[1, 2], 3]})",
                          R"({"prompt": [4294967296]})", R"({"prompt": {"text": "a"}})"}) {
    const ApiError e = completion_error(bad);
    EXPECT_EQ(e.status(), 400) << bad;
    EXPECT_EQ(e.param(), "prompt") << bad;
  }
}

TEST(ServerApi, SamplingParametersAreRead) {
  const ApiRequest r = server::parse_completion_request(body(R"({
    "prompt": "x", "max_tokens": 7, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 1234,
    "stop": ["\n\n", "END"], "n": 3, "logprobs": 2, "ignore_eos": true, "stream": true,
    "stream_options": {"include_usage": true}, "stop_token_ids": [2], "user": "ignored"})"));
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  ASSERT_TRUE(r.params.seed.has_value());
  EXPECT_EQ(*r.params.seed, 1234u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{2}));
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);

  const ApiRequest d = server::parse_completion_request(body(R"({"prompt": "x", "stop": "END", "temperature": null})"));
  EXPECT_EQ(d.params.stop, (std::vector<std::string>{"END"}));
  EXPECT_FALSE(d.max_tokens.has_value());
  EXPECT_EQ(d.logprobs, -1);
  EXPECT_EQ(d.n, 1);
  EXPECT_FALSE(d.stream);
  EXPECT_FLOAT_EQ(d.params.temperature, 1.0f);  // null = not given
  // 2.0 is an integer to JSON-from-Python's eyes.
  EXPECT_EQ(server::parse_completion_request(body(R"({"prompt": "x", "n": 2.0})")).n, 2);
}

TEST(ServerApi, BadParametersAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("temperature": -0.1)", "temperature"},
      {R"("temperature": "hot")", "temperature"},
      {R"("top_p": 0)", "top_p"},
      {R"("top_p": 1.5)", "top_p"},
      {R"("top_k": -2)", "top_k"},
      {R"("top_k": 1.5)", "top_k"},
      {R"("min_p": 1.5)", "min_p"},
      {R"("presence_penalty": 2.5)", "presence_penalty"},
      {R"("frequency_penalty": -3)", "frequency_penalty"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("max_tokens": 0)", "max_tokens"},
      {R"("max_tokens": -5)", "max_tokens"},
      {R"("max_tokens": "10")", "max_tokens"},
      {R"("n": 0)", "n"},
      {R"("n": 1000)", "n"},
      {R"("n": 2.5)", "n"},
      {R"("seed": "abc")", "seed"},
      {R"("seed": 1.5)", "seed"},
      {R"("stop": 5)", "stop"},
      {R"("stop": ["a", 5])", "stop"},
      {R"("stop": [""])", "stop"},
      {R"("stream": "yes")", "stream"},
      {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("stream": true, "stream_options": 5)", "stream_options"},
      {R"("logprobs": 21)", "logprobs"},
      {R"("logprobs": -1)", "logprobs"},
      {R"("logprobs": true)", "logprobs"},
      {R"("ignore_eos": 1)", "ignore_eos"},
      {R"("echo": true)", "echo"},
      {R"("best_of": 3)", "best_of"},
      {R"("logit_bias": {"5": 10})", "logit_bias"},
      {R"("suffix": "end")", "suffix"},
      {R"("stop_token_ids": [-1])", "stop_token_ids"},
      {R"("model": 5)", "model"},
      {R"("response_format": {"type": "yaml"})", "response_format"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": 5}})", "response_format"},
      {R"("structured_outputs": {"json": {}, "regex": "a"})", "structured_outputs"},
  };
  for (const auto& [field, param] : cases) {
    const std::string text = R"({"prompt": "x", )" + field + "}";
    const ApiError e = completion_error(text);
    EXPECT_EQ(e.status(), 400) << text;
    EXPECT_EQ(e.param(), param) << text;
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
  // Accepted "off" values of unsupported features.
  EXPECT_NO_THROW(server::parse_completion_request(body(R"({"prompt": "x", "echo": false, "logit_bias": {}, "best_of": 1})")));
}

// ---- /v1/chat/completions --------------------------------------------------------

TEST(ServerApi, ChatMessages) {
  const ApiRequest r = server::parse_chat_request(body(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "name": "bot"}],
      "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3,
      "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false})"));
  EXPECT_EQ(r.endpoint, server::Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "Hello\nthere");
  EXPECT_TRUE(r.messages[2]["content"].is_null());
  EXPECT_EQ(r.messages[2]["name"], "bot");
  EXPECT_EQ(r.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_FALSE(r.add_generation_prompt);

  EXPECT_EQ(server::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})")).logprobs, 0);
  EXPECT_EQ(server::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})")).logprobs, -1);
}

TEST(ServerApi, ChatErrorsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": ["hi"]})", "messages"},
      {R"({"messages": [{"content": "hi"}]})", "messages"},
      {R"({"messages": [{"role": 1, "content": "hi"}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 50})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 3})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})", "chat_template_kwargs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "temperature"},
  };
  for (const auto& [text, param] : cases) {
    const ApiError e = chat_error(text);
    EXPECT_EQ(e.status(), 400) << text;
    EXPECT_EQ(e.param(), param) << text;
  }
}

// ---- max_tokens against the context ----------------------------------------------------

TEST(ServerApi, MaxTokensAgainstTheContext) {
  ApiRequest c = server::parse_completion_request(body(R"({"prompt": "x"})"));
  EXPECT_EQ(server::resolve_max_tokens(c, 10, 1024, 0), 16);     // OpenAI's default for completions
  EXPECT_EQ(server::resolve_max_tokens(c, 1020, 1024, 0), 4);    // what is left of the context
  ApiRequest chat = server::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_EQ(server::resolve_max_tokens(chat, 24, 1024, 0), 1000);  // the rest of the context
  EXPECT_EQ(server::resolve_max_tokens(chat, 24, 1024, 256), 233);  // what the whole cache holds
  c.max_tokens = 100;
  EXPECT_EQ(server::resolve_max_tokens(c, 924, 1024, 0), 100);

  ApiError e = error_of([&] { server::resolve_max_tokens(c, 925, 1024, 0); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_EQ(e.param(), "max_tokens");  // the prompt fits: the completion asked for does not (issue 16)
  EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("1025"), std::string::npos);

  e = error_of([&] { server::resolve_max_tokens(chat, 1024, 1024, 0); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "messages");
  e = error_of([&] { server::resolve_max_tokens(chat, 3000, 1024, 0); });
  EXPECT_EQ(e.code(), "context_length_exceeded");
}

TEST(ServerApi, MaxTokensBeyondTheContextNamesTheFieldSent) {
  ApiRequest chat = server::parse_chat_request(
      body(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 2000})"));
  const ApiError e = error_of([&] { server::resolve_max_tokens(chat, 10, 1024, 0); });
  EXPECT_EQ(e.param(), "max_completion_tokens");
  EXPECT_EQ(e.code(), "context_length_exceeded");
}

// ---- hostile bodies (issue 16) ---------------------------------------------------------

std::string nested(int levels, const std::string& inner = "") {
  return std::string(size_t(levels), '[') + inner + std::string(size_t(levels), ']');
}

// Each of these crashed the server (SIGSEGV): the nested value was copied when
// a later key was added, then dumped or converted recursively.
TEST(ServerApi, DeeplyNestedBodiesAreRefused) {
  const std::string deep = nested(50000);
  for (const std::string& text : {
           R"({"x": )" + deep + R"(, "y": 1, "prompt": "a"})",
           R"({"prompt": "a", "stop_token_ids": [)" + deep + "]}",
           R"({"prompt": [)" + deep + "]}",
           R"({"messages": [{"role": "user", "content": "a", "name": )" + deep + "}]}",
           R"({"messages": [{"role": "user", "content": )" + deep + "}]}",
           R"({"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"k": )" + deep + "}}",
           deep,
       }) {
    const ApiError e = error_of([&] { server::parse_body(text); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("levels deep"), std::string::npos) << e.what();
  }
}

// JSON inside a string is parsed again under the same bound (issue 39): an
// assistant message's tool-call arguments 20,000 deep crashed the server in
// chat::Value::from_json's recursion. Within the bound they are objects.
TEST(ServerApi, JsonInsideStringsIsDepthBounded) {
  auto chat_with_arguments = [](const std::string& arguments) {
    Json b = Json::object();
    b["messages"] = Json::array({Json{{"role", "user"}, {"content", "hi"}},
                                 Json{{"role", "assistant"}, {"content", ""},
                                      {"tool_calls", Json::array({Json{{"id", "c1"}, {"type", "function"},
                                                                       {"function", Json{{"name", "f"}, {"arguments", arguments}}}}})}},
                                 Json{{"role", "user"}, {"content", "go"}}});
    return b;
  };
  for (const int depth : {server::kMaxJsonDepth + 1, 20000}) {
    std::string deep;
    for (int i = 0; i < depth; ++i) deep += R"({"a":)";
    deep += "1" + std::string(size_t(depth), '}');
    const ApiError e = error_of([&] { server::parse_chat_request(chat_with_arguments(deep)); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "messages");
    EXPECT_NE(std::string(e.what()).find("messages[1].tool_calls[0].function.arguments nests"), std::string::npos)
        << e.what();
  }
  std::string ok;
  for (int i = 0; i < server::kMaxJsonDepth; ++i) ok += R"({"a":)";
  ok += "1" + std::string(size_t(server::kMaxJsonDepth), '}');
  const ApiRequest r = server::parse_chat_request(chat_with_arguments(ok));
  EXPECT_TRUE(r.messages[1]["tool_calls"][0]["function"]["arguments"].is_object());
  const ApiError bad = error_of([&] { server::parse_chat_request(chat_with_arguments("{\"a\": ")); });
  EXPECT_NE(std::string(bad.what()).find("not valid JSON"), std::string::npos) << bad.what();
}

// ---- the route table (issue 39) ----------------------------------------------------------

// docs/reliability.md prints server/routes.h's table: the same routes, the same
// exposure, body and bounds, in the same order.
TEST(ServerRoutes, RouteTableIsTheDocumented) {
  std::ifstream f(std::filesystem::path(FP8LM_SOURCE_DIR) / "docs" / "reliability.md");
  ASSERT_TRUE(f) << "docs/reliability.md";
  std::vector<std::string> rows;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("| `GET` |", 0) == 0 || line.rfind("| `POST` |", 0) == 0) rows.push_back(line);
  ASSERT_EQ(rows.size(), server::kRoutes.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const server::Route& r = server::kRoutes[i];
    std::ostringstream want;
    want << "| `" << r.method << "` | `" << r.path << "` | " << (r.open ? "open" : "key") << " | "
         << (r.json_body ? "JSON" : "—") << " | " << r.bounds << " |";
    EXPECT_EQ(rows[i], want.str());
  }
}

TEST(ServerRoutes, PathsAndContentTypes) {
  ASSERT_NE(server::find_route("GET", "/health"), nullptr);
  EXPECT_TRUE(server::find_route("HEAD", "/")->open);
  EXPECT_FALSE(server::find_route("POST", "/tokenize")->open);
  EXPECT_EQ(server::find_route("GET", "/tokenize"), nullptr);
  EXPECT_EQ(server::find_route("GET", "/v1/models/"), nullptr);  // no model named
  EXPECT_EQ(server::find_route("GET", "/v1/models/org/name")->path, "/v1/models/{model}");
  EXPECT_EQ(server::find_route("GET", "/health/"), nullptr);
  EXPECT_EQ(server::find_route("GET", "//health"), nullptr);
  EXPECT_EQ(server::find_route("OPTIONS", "/v1/completions"), nullptr);
  for (const char* ok : {"application/json", "Application/JSON", "application/json; charset=utf-8", " application/json "})
    EXPECT_TRUE(server::is_json_content_type(ok)) << ok;
  for (const char* no : {"", "text/plain", "application/jsonx", "application/x-www-form-urlencoded", "multipart/form-data"})
    EXPECT_FALSE(server::is_json_content_type(no)) << no;
}

TEST(ServerApi, NestingUpToTheLimitIsAccepted) {
  // The body object is level 1.
  const int inner = server::kMaxJsonDepth - 1;
  const Json ok = server::parse_body(R"({"chat_template_kwargs": )" + nested(inner, "1") + "}");
  EXPECT_TRUE(ok.is_object());
  const ApiError e = error_of([&] { server::parse_body(R"({"k": )" + nested(inner + 1, "1") + "}"); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_NE(std::string(e.what()).find(std::to_string(server::kMaxJsonDepth)), std::string::npos);
}

// An offending value is shown by its type, not dumped whole into the message.
TEST(ServerApi, ErrorMessagesDoNotEchoLargeValues) {
  std::string big = "[";
  for (int i = 0; i < 100000; ++i) big += std::to_string(i) + ",";
  big += "0]";
  for (const std::string& text : {R"({"prompt": "a", "stop_token_ids": [)" + big + "]}", R"({"prompt": [1, )" + big + "]}"}) {
    const ApiError e = completion_error(text);
    EXPECT_EQ(e.status(), 400);
    EXPECT_LT(std::string(e.what()).size(), 200u) << std::string(e.what()).substr(0, 200);
  }
}

// Values in range as doubles that leave it once narrowed to the sampler's
// floats (inf, or 0 for an open lower bound) are named, not refused later
// by the sampler with no param.
TEST(ServerApi, FloatParamsAreCheckedAsTheSamplerHoldsThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("temperature": 1e308)", "temperature"},
      {R"("temperature": 3.5e38)", "temperature"},
      {R"("repetition_penalty": 1e39)", "repetition_penalty"},
      {R"("repetition_penalty": 1e-50)", "repetition_penalty"},
      {R"("top_p": 1e-50)", "top_p"},
  };
  for (const auto& [field, param] : cases) {
    const std::string text = R"({"prompt": "x", )" + field + "}";
    const ApiError e = completion_error(text);
    EXPECT_EQ(e.status(), 400) << text;
    EXPECT_EQ(e.param(), param) << text;
  }
  const ApiRequest r = server::parse_completion_request(body(R"({"prompt": "x", "temperature": 1e30, "min_p": 1e-50})"));
  EXPECT_FLOAT_EQ(r.params.temperature, 1e30f);
  EXPECT_EQ(r.params.min_p, 0.0f);  // [0, 1] holds 0
}

// n × prompts × stop lists: each choice copies the prompt and the stops.
TEST(ServerApi, ExpandedSizeIsBoundedNamingN) {
  std::string stops = "[";
  for (int i = 0; i < 200000; ++i) stops += "\"stop-" + std::to_string(i) + "\",";
  stops += "\"end\"]";
  const ApiRequest one = server::parse_completion_request(body(R"({"prompt": "x", "stop": )" + stops + "}"));
  EXPECT_NO_THROW(server::check_expanded_size(one, {1}));
  const int64_t per_choice = server::expanded_bytes(one, {1});
  EXPECT_GT(per_choice, int64_t(200000 * (sizeof(std::string) + 6)));

  const ApiRequest many = server::parse_completion_request(body(R"({"prompt": "x", "n": 128, "stop": )" + stops + "}"));
  EXPECT_EQ(server::expanded_bytes(many, {1}), 128 * per_choice);
  ApiError e = error_of([&] { server::check_expanded_size(many, {1}); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "n");
  EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();

  // With n = 1, many prompts multiply the same way; the list of prompts is named.
  e = error_of([&] { server::check_expanded_size(one, std::vector<int64_t>(100, 1)); });
  EXPECT_EQ(e.param(), "prompt");

  // Long prompts count too: 128 copies of a 1M-token prompt.
  const ApiRequest n128 = server::parse_completion_request(body(R"({"prompt": "x", "n": 128})"));
  EXPECT_NO_THROW(server::check_expanded_size(n128, {131072}));  // a 128K context, 64 MiB in all
  EXPECT_EQ(error_of([&] { server::check_expanded_size(n128, {1 << 20}); }).param(), "n");
}

// ---- logprobs formats ---------------------------------------------------------------

std::string fake_text(int32_t id) { return "t" + std::to_string(id); }

std::vector<engine::SampleResult> fake_logprobs() {
  engine::SampleResult a;
  a.token = 5;
  a.logprob = -0.5f;
  a.top = {{5, -0.5f}, {7, -1.5f}, {9, -2.5f}};
  engine::SampleResult b;
  b.token = 8;
  b.logprob = -3.0f;
  b.top = {{7, -0.25f}, {6, -1.0f}, {8, -3.0f}};
  return {a, b};
}

TEST(ServerApi, CompletionLogprobsFormat) {
  int64_t offset = 0;
  const Json j = server::completion_logprobs(fake_logprobs(), 2, fake_text, offset);
  EXPECT_EQ(j["tokens"], Json::array({"t5", "t8"}));
  EXPECT_DOUBLE_EQ(j["token_logprobs"][0].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(j["token_logprobs"][1].get<double>(), -3.0);
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
  EXPECT_DOUBLE_EQ(j["top_logprobs"][0]["t7"].get<double>(), -1.5);
  // The chosen token always appears among the top ones (vLLM's convention).
  EXPECT_EQ(j["top_logprobs"][1].size(), 3u);
  EXPECT_DOUBLE_EQ(j["top_logprobs"][1]["t8"].get<double>(), -3.0);
  EXPECT_EQ(j["text_offset"], Json::array({0, 2}));
  EXPECT_EQ(offset, 4);
  // logprobs = 0: the chosen token only.
  offset = 0;
  EXPECT_EQ(server::completion_logprobs(fake_logprobs(), 0, fake_text, offset)["top_logprobs"][0].size(), 1u);
}

TEST(ServerApi, ChatLogprobsFormat) {
  const Json j = server::chat_logprobs(fake_logprobs(), 2, fake_text);
  ASSERT_EQ(j["content"].size(), 2u);
  const Json& first = j["content"][0];
  EXPECT_EQ(first["token"], "t5");
  EXPECT_DOUBLE_EQ(first["logprob"].get<double>(), -0.5);
  EXPECT_EQ(first["bytes"], Json::array({116, 53}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], "t7");
  EXPECT_EQ(server::chat_logprobs(fake_logprobs(), 0, fake_text)["content"][0]["top_logprobs"].size(), 0u);
  EXPECT_DOUBLE_EQ(server::json_logprob(-std::numeric_limits<float>::infinity()), -9999.0);
}

TEST(ServerApi, Usage) {
  const Json u = server::usage_json(7, 5);
  EXPECT_EQ(u["prompt_tokens"], 7);
  EXPECT_EQ(u["completion_tokens"], 5);
  EXPECT_EQ(u["total_tokens"], 12);
  EXPECT_FALSE(u.contains("prompt_tokens_details"));  // prefix caching off: not reported
  // On: OpenAI's shape, which its clients read as usage.prompt_tokens_details.cached_tokens.
  const Json cached = server::usage_json(40, 5, 32);
  EXPECT_EQ(server::dump(cached), R"({"prompt_tokens":40,"completion_tokens":5,"total_tokens":45,)"
                                  R"("prompt_tokens_details":{"cached_tokens":32}})");
}

// ---- reasoning split ------------------------------------------------------------------

struct Split {
  std::string reasoning, content;
};

// Whole, and pushed in two pieces at every byte, and byte by byte: all equal.
Split split_all_ways(server::ReasoningParser p, const std::string& text) {
  auto run = [&](const std::vector<std::string>& pieces) {
    server::ReasoningSplitter s(p);
    Split out;
    for (const std::string& piece : pieces) {
      const auto d = s.push(piece);
      out.reasoning += d.reasoning;
      out.content += d.content;
    }
    const auto d = s.finish();
    out.reasoning += d.reasoning;
    out.content += d.content;
    return out;
  };
  const Split whole = run({text});
  for (size_t at = 0; at <= text.size(); ++at) {
    const Split two = run({text.substr(0, at), text.substr(at)});
    EXPECT_EQ(two.reasoning, whole.reasoning) << "split at " << at;
    EXPECT_EQ(two.content, whole.content) << "split at " << at;
  }
  std::vector<std::string> bytes;
  for (const char c : text) bytes.emplace_back(1, c);
  const Split each = run(bytes);
  EXPECT_EQ(each.reasoning, whole.reasoning);
  EXPECT_EQ(each.content, whole.content);
  return whole;
}

TEST(ServerReasoning, Qwen3) {
  using P = server::ReasoningParser;
  Split s = split_all_ways(P::kQwen3, "<think>\nLet me see.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(s.reasoning, "\nLet me see.\n");
  EXPECT_EQ(s.content, "\n\nThe answer is 4.");
  s = split_all_ways(P::kQwen3, "No thinking here, </think> stays.");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "No thinking here, </think> stays.");
  s = split_all_ways(P::kQwen3, "<think>cut off while thinking </thi");
  EXPECT_EQ(s.reasoning, "cut off while thinking </thi");
  EXPECT_EQ(s.content, "");
  s = split_all_ways(P::kQwen3, "<thi");
  EXPECT_EQ(s.content, "<thi");
  s = split_all_ways(P::kQwen3, "");
  EXPECT_EQ(s.content, "");
}

TEST(ServerReasoning, DeepSeekR1) {
  using P = server::ReasoningParser;
  Split s = split_all_ways(P::kDeepSeekR1, "Hmm, 2 + 2.</think>4");
  EXPECT_EQ(s.reasoning, "Hmm, 2 + 2.");
  EXPECT_EQ(s.content, "4");
  s = split_all_ways(P::kDeepSeekR1, "<think>with the tag</think>done <think> later");
  EXPECT_EQ(s.reasoning, "with the tag");
  EXPECT_EQ(s.content, "done <think> later");
  s = split_all_ways(P::kDeepSeekR1, "never closed");
  EXPECT_EQ(s.reasoning, "never closed");
  EXPECT_EQ(s.content, "");
}

TEST(ServerReasoning, NoneAndNames) {
  const Split s = split_all_ways(server::ReasoningParser::kNone, "<think>a</think>b");
  EXPECT_EQ(s.content, "<think>a</think>b");
  EXPECT_EQ(server::parse_reasoning_parser("qwen3"), server::ReasoningParser::kQwen3);
  EXPECT_EQ(server::parse_reasoning_parser("deepseek_r1"), server::ReasoningParser::kDeepSeekR1);
  EXPECT_EQ(server::parse_reasoning_parser(""), server::ReasoningParser::kNone);
  EXPECT_THROW(server::parse_reasoning_parser("granite"), Error);
}

// ---- metrics --------------------------------------------------------------------------

TEST(ServerMetrics, HistogramIsCumulative) {
  server::Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le: on the bound counts in it
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render(out, "x_seconds", "help");
  EXPECT_NE(out.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_sum 7.65\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count 4\n"), std::string::npos);
  // With labels: on every series, before le.
  out.clear();
  h.render(out, "x_seconds", "help", "model_name=\"m\"");
  EXPECT_NE(out.find("x_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum{model_name=\"m\"} 7.65\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count{model_name=\"m\"} 4\n"), std::string::npos) << out;
}

TEST(ServerMetrics, RenderHasEveryMetric) {
  server::ServerMetrics m;
  m.observe_ttft(0.02);
  m.observe_inter_token(0.01);
  m.observe_finished(0.5, 10, 4, "length");
  m.observe_finished(0.2, 3, 1, "abort");
  server::EngineGauges g;
  g.running = 2, g.waiting = 3, g.kv_cache_usage = 0.25, g.preemptions = 7;
  g.prefix_cache_queries = 40, g.prefix_cache_hits = 32;
  const std::string out = m.render(g, "my-model");
  EXPECT_EQ(out.find("spec_decode"), std::string::npos) << "no speculative counters without speculation";
  for (const char* line : {"fp8lm:num_requests_running{model_name=\"my-model\"} 2\n",
                           "fp8lm:num_requests_waiting{model_name=\"my-model\"} 3\n",
                           "fp8lm:kv_cache_usage_perc{model_name=\"my-model\"} 0.25\n",
                           "fp8lm:num_preemptions_total{model_name=\"my-model\"} 7\n",
                           "# TYPE fp8lm:prefix_cache_queries_total counter\n",
                           "fp8lm:prefix_cache_queries_total{model_name=\"my-model\"} 40\n",
                           "# TYPE fp8lm:prefix_cache_hits_total counter\n",
                           "fp8lm:prefix_cache_hits_total{model_name=\"my-model\"} 32\n",
                           "fp8lm:prompt_tokens_total{model_name=\"my-model\"} 13\n",
                           "fp8lm:generation_tokens_total{model_name=\"my-model\"} 5\n",
                           "fp8lm:request_success_total{model_name=\"my-model\",finished_reason=\"length\"} 1\n",
                           "fp8lm:request_success_total{model_name=\"my-model\",finished_reason=\"abort\"} 1\n",
                           "fp8lm:request_success_total{model_name=\"my-model\",finished_reason=\"stop\"} 0\n",
                           "fp8lm:time_to_first_token_seconds_count{model_name=\"my-model\"} 1\n",
                           "fp8lm:time_per_output_token_seconds_count{model_name=\"my-model\"} 1\n",
                           "fp8lm:e2e_request_latency_seconds_count{model_name=\"my-model\"} 2\n",
                           "fp8lm:e2e_request_latency_seconds_bucket{model_name=\"my-model\",le=\"+Inf\"} 2\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line;
  g.speculative = true;
  g.spec_drafts = 9, g.spec_draft_tokens = 36, g.spec_accepted_tokens = 20;
  g.spec_accepted_per_pos = {8, 6, 4, 2};
  const std::string spec = m.render(g, "my-model");
  for (const char* line : {"# TYPE fp8lm:spec_decode_num_drafts_total counter\n",
                           "fp8lm:spec_decode_num_drafts_total{model_name=\"my-model\"} 9\n",
                           "fp8lm:spec_decode_num_draft_tokens_total{model_name=\"my-model\"} 36\n",
                           "fp8lm:spec_decode_num_accepted_tokens_total{model_name=\"my-model\"} 20\n",
                           "# TYPE fp8lm:spec_decode_num_accepted_tokens_per_pos_total counter\n",
                           "fp8lm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"my-model\",position=\"0\"} 8\n",
                           "fp8lm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"my-model\",position=\"3\"} 2\n"})
    EXPECT_NE(spec.find(line), std::string::npos) << line;
}

// ---- the engine's per-token logprobs ------------------------------------------------------

TEST(ServerEngineLogprobs, SameTokensAndTheRawLogSoftmax) {
  const std::filesystem::path dir =
      std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>();
  engine::RuntimeOptions opt;
  opt.threads = 2;
  auto rt = engine::Runtime::load(dir, {}, opt);
  const std::vector<int32_t> prompt = ids_of(model_manifest()["shipped"]["prompts"][0]["ids"]);
  for (const bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "seeded sampling" : "greedy");
    engine::SamplingParams p;
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.temperature = sampled ? 0.8f : 0.0f;
    if (sampled) p.seed = 77;
    const engine::GenerationResult want = engine::generate(*rt, prompt, p);

    engine::Engine eng(*rt, {64, 4});
    std::vector<int32_t> tokens;
    std::vector<engine::SampleResult> lps;
    engine::Request r{prompt, p, [&](const engine::RequestOutput& o) {
                        tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
                        EXPECT_EQ(o.logprobs.size(), o.new_tokens.size());
                        lps.insert(lps.end(), o.logprobs.begin(), o.logprobs.end());
                      }};
    r.logprobs = 3;
    eng.add_request(std::move(r));
    eng.add_request({std::vector<int32_t>(9, 300), p, {}});  // a neighbour without logprobs
    eng.run_to_completion();
    EXPECT_EQ(tokens, want.tokens);
    ASSERT_EQ(lps.size(), tokens.size());
    for (size_t i = 0; i < lps.size(); ++i) {
      EXPECT_EQ(lps[i].token, tokens[i]);
      ASSERT_EQ(lps[i].top.size(), 3u);
      EXPECT_LE(lps[i].logprob, 0.0f);
      EXPECT_GE(lps[i].top[0].logprob, lps[i].top[1].logprob);
      EXPECT_GE(lps[i].top[1].logprob, lps[i].top[2].logprob);
      if (!sampled) {  // greedy picks the raw argmax: the best alternative
        EXPECT_EQ(lps[i].top[0].token, tokens[i]);
        EXPECT_FLOAT_EQ(lps[i].top[0].logprob, lps[i].logprob);
      }
    }
  }
  engine::Engine eng(*rt, {64, 4});
  engine::Request bad{prompt, engine::SamplingParams{}, {}};
  bad.logprobs = -2;
  EXPECT_THROW(eng.add_request(std::move(bad)), Error);
}

// Structured outputs: what each field becomes (the compiled grammar is checked by the server).
TEST(ServerApi, StructuredOutputFieldsBecomeGrammarSpecs) {
  using Kind = structured::GrammarSpec::Kind;
  auto spec = [](const std::string& fields) {
    return server::parse_completion_request(body(R"({"prompt": "x", )" + fields + "}"));
  };
  EXPECT_FALSE(spec(R"("response_format": {"type": "text"})").grammar);
  const auto js = spec(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object", "b": 1, "a": 2}}})");
  ASSERT_TRUE(js.grammar);
  EXPECT_EQ(js.grammar->kind, Kind::kJsonSchema);
  EXPECT_EQ(js.grammar->text, R"({"type":"object","b":1,"a":2})");  // the client's key order kept
  EXPECT_EQ(js.grammar_param, "response_format");
  EXPECT_TRUE(js.grammar->any_whitespace);
  const auto obj = spec(R"("response_format": {"type": "json_object"}, "structured_outputs": {"disable_any_whitespace": true})");
  EXPECT_EQ(obj.grammar->kind, Kind::kJsonObject);
  EXPECT_FALSE(obj.grammar->any_whitespace);
  const auto choice = spec(R"("structured_outputs": {"choice": ["a", "b"]})");
  EXPECT_EQ(choice.grammar->kind, Kind::kChoice);
  EXPECT_EQ(choice.grammar->choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(choice.grammar_param, "structured_outputs");
  EXPECT_EQ(spec(R"("structured_outputs": {"json": "{\"type\": \"integer\"}"})").grammar->text, R"({"type":"integer"})");
  EXPECT_EQ(spec(R"("structured_outputs": {"regex": "a+"})").grammar->kind, Kind::kRegex);
  EXPECT_EQ(spec(R"("structured_outputs": {"grammar": "root ::= \"a\""})").grammar->kind, Kind::kGrammar);
  const auto chat = server::parse_chat_request(
      body(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"));
  EXPECT_EQ(chat.grammar->kind, Kind::kJsonObject);
}

}  // namespace
}  // namespace fp8lm::test
