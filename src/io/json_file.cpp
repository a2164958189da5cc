#include "io/json_file.h"

#include <fstream>
#include <sstream>

namespace fp8lm::io {

namespace {

// Thrown by the depth callback; caught below and turned into the caller's error.
struct TooDeep {};

// Whether a parser callback's event opens a container past the bound: the
// callback sees each container's start with the depth of its parent (0 for the
// outermost), so it can refuse it before it is built.
template <typename Json>
bool opens_beyond(int depth, typename Json::parse_event_t event, int max_depth) {
  return (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
         depth >= max_depth;
}

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& origin, int max_depth) {
  const typename Json::parser_callback_t limit = [max_depth](int depth, typename Json::parse_event_t event, Json&) {
    if (opens_beyond<Json>(depth, event, max_depth)) throw TooDeep{};
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), limit);
  } catch (const TooDeep&) {
    throw Error(origin + " nests arrays and objects more than " + std::to_string(max_depth) + " levels deep");
  } catch (const typename Json::parse_error& e) {
    throw Error(origin + ": not valid JSON (at byte " + std::to_string(e.byte) + "): " + e.what());
  } catch (const typename Json::exception& e) {
    // e.g. out_of_range for a number beyond double's range ("1e999")
    throw Error(origin + ": not valid JSON (a value out of range): " + e.what());
  }
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& origin, int max_depth) {
  return parse_bounded<nlohmann::json>(text, origin, max_depth);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& origin, int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, origin, max_depth);
}

std::optional<nlohmann::ordered_json> try_parse_ordered_json(std::string_view text, int max_depth) {
  using Json = nlohmann::ordered_json;
  // No exceptions (a streaming tool-call parser tries often): a container past
  // the bound is discarded where it opens (nothing below it is built) and noted.
  bool deep = false;
  const Json::parser_callback_t limit = [max_depth, &deep](int depth, Json::parse_event_t event, Json&) {
    deep = deep || opens_beyond<Json>(depth, event, max_depth);
    return !deep;
  };
  Json j = Json::parse(text.begin(), text.end(), limit, /*allow_exceptions=*/false);
  if (deep || j.is_discarded()) return std::nullopt;
  return j;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path.string() + ": cannot open file");
  std::ostringstream buffer;
  buffer << f.rdbuf();
  if (f.bad()) throw Error(path.string() + ": read error");
  return parse_json(buffer.str(), path.string());
}

}  // namespace fp8lm::io
