#include "server/routes.h"

#include <algorithm>
#include <cctype>

namespace fp8lm::server {
namespace {

bool matches(std::string_view pattern, std::string_view path) {
  const size_t brace = pattern.find('{');
  if (brace == std::string_view::npos) return pattern == path;
  // "/v1/models/{model}": the prefix, then anything non-empty (a served name may hold '/').
  return path.size() > brace && path.substr(0, brace) == pattern.substr(0, brace);
}

// Header values lose the spaces and tabs around them (RFC 9110's optional whitespace).
std::string_view trim_spaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const Route* find_route(std::string_view method, std::string_view path) {
  const std::string_view m = method == "HEAD" ? std::string_view("GET") : method;
  for (const Route& r : kRoutes)
    if (r.method == m && matches(r.path, path)) return &r;
  return nullptr;
}

bool is_json_content_type(std::string_view content_type) {
  const std::string_view type = trim_spaces(content_type.substr(0, content_type.find(';')));
  constexpr std::string_view kJson = "application/json";
  return type.size() == kJson.size() && std::equal(type.begin(), type.end(), kJson.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

}  // namespace fp8lm::server
