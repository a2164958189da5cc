#include "tokenizer/pattern.h"

namespace fp8lm::tokenizer {

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  out.reserve(text.size());
  std::size_t last = 0;
  for_each_match(text, [&](std::size_t start, std::size_t end) {
    out.append(text.substr(last, start - last));
    out.append(content);
    last = end;
  });
  out.append(text.substr(last));
  return out;
}

Pattern make_pattern(const nlohmann::json& spec, const JsonPath& at) {
  if (spec.is_object() && spec.size() == 1) {
    if (spec.contains("String")) {
      const auto& s = spec.at("String");
      if (!s.is_string()) (at / "String").fail("must be a string");
      return Pattern(s.get<std::string>(), nullptr);
    }
    if (spec.contains("Regex")) {
      const auto& r = spec.at("Regex");
      if (!r.is_string()) (at / "Regex").fail("must be a string");
      return Pattern({}, std::make_shared<const Regex>(r.get<std::string>(), at.file + ": " + at.path + ".Regex"));
    }
  }
  at.fail("must be {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace fp8lm::tokenizer
