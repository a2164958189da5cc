#include "server/api_error.h"

#include "common/error.h"

namespace fp8lm::server {
namespace {

std::string default_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "invalid_request_error";
    case 503: return "server_overloaded";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code, std::string type)
    : std::runtime_error(message),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)),
      type_(type.empty() ? default_type(status) : std::move(type)) {}

Json error_body(const ApiError& e) {
  Json err = Json::object();
  err["message"] = e.what();
  err["type"] = e.type();
  err["param"] = e.param().empty() ? Json(nullptr) : Json(e.param());
  err["code"] = e.code().empty() ? Json(nullptr) : Json(e.code());
  Json body = Json::object();
  body["error"] = std::move(err);
  return body;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json parse_json_text(std::string_view text, const std::string& what, const std::string& param) {
  try {
    return io::parse_ordered_json(text, what);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), param);
  }
}

}  // namespace fp8lm::server
