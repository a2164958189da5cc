// The server's errors and request JSON, apart from the API's fields: ApiError (an HTTP status
// and OpenAI's error object), the never-throwing dump, and the one bounded parser for request
// bodies and JSON inside their strings. Below api.h and structured_request.h, which both use it.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/json_file.h"

namespace fp8lm::server {

// Key order is kept: it shows in chat templates (tojson) and in responses.
using Json = nlohmann::ordered_json;

// An error for the client: HTTP status and OpenAI's error object.
class ApiError : public std::runtime_error {
 public:
  // `param` names the request field at fault (empty: none); `type` defaults
  // by status (invalid_request_error, authentication_error, …).
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {},
           std::string type = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string param_, code_, type_;
};

// A 400 for the request field `param`.
[[noreturn]] inline void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// The 503 every request still arriving, waiting or compiling gets while the server drains.
inline ApiError shutting_down() { return ApiError(503, "the server is shutting down", "", "", "server_error"); }

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
Json error_body(const ApiError& e);

// JSON text that never throws on bad UTF-8 (replaced with U+FFFD).
std::string dump(const Json& j);

// How deeply a request body, or JSON inside one of its strings, may nest arrays
// and objects (the body object is level 1): io::kMaxJsonDepth, refused while
// parsing, before the tree is built (io/json_file.h says why).
inline constexpr int kMaxJsonDepth = io::kMaxJsonDepth;

// JSON text through the one bounded parser (io::parse_ordered_json); 400
// naming `what` (and `param`) when it is not JSON or nests too deep.
Json parse_json_text(std::string_view text, const std::string& what, const std::string& param);

// The body as a JSON object; 400 naming the problem otherwise.
Json parse_body(std::string_view body);

}  // namespace fp8lm::server
