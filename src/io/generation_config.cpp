#include "io/generation_config.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "common/error.h"
#include "io/json_file.h"
#include "io/json_value.h"

namespace fp8lm::io {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A float field within [lo, hi] (lo excluded when `open_low`); absent or null: nullopt.
std::optional<double> ranged(const nlohmann::json& j, const char* key, double lo, double hi, bool open_low,
                             const std::string& origin) {
  const std::optional<double> v = optional<double>(j, key, origin);
  if (v && !(std::isfinite(*v) && (open_low ? *v > lo : *v >= lo) && *v <= hi))
    throw Error(origin + ": field '" + key + "' is " + number(*v) + "; it must be in " + (open_low ? "(" : "[") +
                number(lo) + ", " + (std::isinf(hi) ? std::string("∞)") : number(hi) + "]"));
  return v;
}

}  // namespace

std::string GenerationDefaults::describe() const {
  if (do_sample && !*do_sample) return "greedy (do_sample false)";
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (temperature) add("temperature " + number(*temperature));
  if (top_p) add("top_p " + number(*top_p));
  if (top_k) add("top_k " + std::to_string(*top_k));
  if (min_p) add("min_p " + number(*min_p));
  if (repetition_penalty) add("repetition_penalty " + number(*repetition_penalty));
  return s.empty() ? "no sampling fields" : s;
}

GenerationDefaults read_generation_config(const std::filesystem::path& dir) {
  GenerationDefaults g;
  const std::filesystem::path path = dir / "generation_config.json";
  if (!std::filesystem::is_regular_file(path)) return g;
  const nlohmann::json j = read_json_file(path);
  const std::string origin = path.string();
  if (!j.is_object()) throw Error(origin + ": the file must hold a JSON object, not " + json_kind_name(j));
  g.source = path;
  constexpr double kInf = INFINITY;
  g.do_sample = optional<bool>(j, "do_sample", origin);
  g.temperature = ranged(j, "temperature", 0.0, kInf, false, origin);
  g.top_p = ranged(j, "top_p", 0.0, 1.0, true, origin);
  g.min_p = ranged(j, "min_p", 0.0, 1.0, false, origin);
  g.repetition_penalty = ranged(j, "repetition_penalty", 0.0, kInf, true, origin);
  g.top_k = optional<int64_t>(j, "top_k", origin);
  if (g.top_k && (*g.top_k < -1 || *g.top_k > INT32_MAX))
    throw Error(origin + ": field 'top_k' is " + std::to_string(*g.top_k) + "; it must be -1 or 0 (off) or a count");
  if (const nlohmann::json* eos = json_given(j, "eos_token_id")) {
    const auto id = [&](const nlohmann::json& v) {
      if (!json_is_count(v, INT32_MAX))
        throw Error(origin + ": field 'eos_token_id' must be a token id or a list of them, found " +
                    (v.is_number_integer() ? std::to_string(v.get<int64_t>()) : json_kind_name(v)));
      return v.get<int64_t>();
    };
    if (eos->is_array())
      for (const nlohmann::json& v : *eos) g.eos_token_ids.push_back(id(v));
    else
      g.eos_token_ids.push_back(id(*eos));
  }
  return g;
}

}  // namespace fp8lm::io
