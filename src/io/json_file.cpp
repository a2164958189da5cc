#include "io/json_file.h"

#include <fstream>
#include <sstream>

namespace fp8lm::io {

nlohmann::json parse_json(std::string_view text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(origin + ": not valid JSON (at byte " + std::to_string(e.byte) + "): " + e.what());
  } catch (const nlohmann::json::exception& e) {
    // e.g. out_of_range for a number beyond double's range ("1e999")
    throw Error(origin + ": not valid JSON (a value out of range): " + e.what());
  }
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
