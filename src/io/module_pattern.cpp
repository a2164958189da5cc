#include "io/module_pattern.h"

#include <optional>

#include "common/error.h"

namespace fp8lm::io {
namespace {

// Patterns come from files and the command line; a bound keeps std::regex's
// recursive compiler and matcher away from pathological input.
constexpr size_t kMaxRegexLength = 512;

// libstdc++'s default matcher backtracks (exponential on patterns like
// "(.*)*x"); its __polynomial flag selects the Thompson-NFA matcher, linear in
// the name's length. Back-references, which need backtracking, are then refused.
#ifdef __GLIBCXX__
constexpr auto kRegexFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
constexpr auto kRegexFlags = std::regex::ECMAScript;
#endif

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// `module` is `ancestor` or lies inside it ("model.layers.0" contains "model.layers.0.mlp.up_proj").
bool inside(std::string_view module, std::string_view ancestor) {
  return starts_with(module, ancestor) &&
         (module.size() == ancestor.size() || module[ancestor.size()] == '.');
}

// "model.layers.3.mlp.experts.7.up_proj" -> "model.layers.3.mlp.experts"; "" when not an expert.
std::string_view experts_block(std::string_view module) {
  const size_t pos = module.find(".experts.");
  return pos == std::string_view::npos ? std::string_view{} : module.substr(0, pos + 8);
}

}  // namespace

ModulePattern::ModulePattern(std::string_view entry, PatternStyle style, const std::string& where)
    : text_(entry), style_(style) {
  if (entry.empty()) throw Error(where + ": empty module name in list");
  const bool regex_allowed = style == PatternStyle::kCompressedTensors || style == PatternStyle::kKeepList;
  if (regex_allowed && starts_with(entry, "re:")) {
    const std::string_view body = entry.substr(3);
    if (body.size() > kMaxRegexLength)
      throw Error(where + ": regular expression '" + std::string(body.substr(0, 40)) + "...' is longer than " +
                  std::to_string(kMaxRegexLength) + " characters");
    try {
      regex_ = std::make_shared<const std::regex>(std::string(body), kRegexFlags);
    } catch (const std::regex_error& e) {
      throw Error(where + ": '" + std::string(entry) + "' is not a valid regular expression (" + e.what() + ")");
    }
    kind_ = Kind::kRegex;
  } else if (style == PatternStyle::kCompressedTensors && entry == "Linear") {
    kind_ = Kind::kClassLinear;
  }
}

int ModulePattern::match_rank(std::string_view module) const {
  switch (kind_) {
    case Kind::kClassLinear:
      return 1;  // callers only ask about linear modules
    case Kind::kRegex: {
      // Python's re.match: the match must start at 0 but need not reach the end.
      std::match_results<std::string_view::const_iterator> m;
      return std::regex_search(module.begin(), module.end(), m, *regex_,
                               std::regex_constants::match_continuous)
                 ? 2
                 : 0;
    }
    case Kind::kExact:
      break;
  }
  const std::string_view t = text_;
  switch (style_) {
    case PatternStyle::kCompressedTensors:
      return module == t ? 3 : 0;
    case PatternStyle::kModuleList: {
      if (inside(module, t)) return 3;
      // vLLM runs a layer's experts as one fused module: if the list names any
      // part of that block, the whole block stays unquantized.
      const std::string_view block = experts_block(module);
      return !block.empty() && t.find("experts") != std::string_view::npos &&
                     t.find(block) != std::string_view::npos
                 ? 3
                 : 0;
    }
    case PatternStyle::kModelOpt:
      return module == t || module.find(t) != std::string_view::npos || fnmatch(module, t) ? 3 : 0;
    case PatternStyle::kKeepList:
      return inside(module, t) ? 3 : 0;
  }
  return 0;
}

bool ModulePattern::matches(std::string_view module) const { return match_rank(module) > 0; }

bool fnmatch(std::string_view name, std::string_view pat) {
  // Iterative glob with single-star backtracking: linear in practice, never recursive.
  size_t n = 0, p = 0, star_p = std::string_view::npos, star_n = 0;
  auto class_match = [&](size_t& pp, char c) -> std::optional<bool> {
    // pp points at '['; returns nullopt when the bracket is unterminated (then '[' is literal).
    size_t i = pp + 1;
    bool negate = false;
    if (i < pat.size() && pat[i] == '!') { negate = true; ++i; }
    const size_t first = i;
    bool hit = false;
    while (i < pat.size() && (pat[i] != ']' || i == first)) {
      if (i + 2 < pat.size() && pat[i + 1] == '-' && pat[i + 2] != ']') {
        hit = hit || (pat[i] <= c && c <= pat[i + 2]);
        i += 3;
      } else {
        hit = hit || pat[i] == c;
        ++i;
      }
    }
    if (i >= pat.size()) return std::nullopt;
    pp = i + 1;
    return hit != negate;
  };
  while (n < name.size()) {
    bool advanced = false;
    if (p < pat.size()) {
      const char pc = pat[p];
      if (pc == '*') {
        star_p = p++;
        star_n = n;
        continue;
      }
      if (pc == '?') {
        ++p, ++n;
        advanced = true;
      } else if (pc == '[') {
        size_t pp = p;
        std::optional<bool> r = class_match(pp, name[n]);
        if (!r) {
          if (name[n] == '[') { ++p, ++n; advanced = true; }
        } else if (*r) {
          p = pp, ++n;
          advanced = true;
        }
      } else if (pc == name[n]) {
        ++p, ++n;
        advanced = true;
      }
    }
    if (advanced) continue;
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    n = ++star_n;
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

}  // namespace fp8lm::io
