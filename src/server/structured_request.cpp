#include "server/structured_request.h"

#include <vector>

#include "common/error.h"
#include "io/json_file.h"
#include "server/api_error.h"

namespace fp8lm::server {
namespace {

using Kind = structured::GrammarSpec::Kind;

std::string kind_of(const Json& v) { return io::json_kind_name(v); }

// JSON text of a schema given as an object (or a string holding one, as vLLM's `json` allows).
std::string schema_text(const Json& v, const std::string& param, const std::string& what) {
  if (v.is_object()) return dump(v);
  if (v.is_string()) {
    const Json parsed = parse_json_text(v.get<std::string>(), what, param);
    if (!parsed.is_object()) bad(param, what + " must be a JSON schema object, not " + kind_of(parsed));
    return dump(parsed);
  }
  bad(param, what + " must be a JSON schema object, not " + kind_of(v));
}

std::optional<structured::GrammarSpec> response_format(const Json& rf) {
  const std::string p = "response_format";
  if (!rf.is_object()) bad(p, "response_format must be an object, not " + kind_of(rf));
  const Json* type = io::json_given(rf, "type");
  if (type == nullptr || !type->is_string()) bad(p, "response_format.type must be a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return structured::GrammarSpec{Kind::kJsonObject, "", {}, true};
  if (t == "json_schema") {
    const Json* js = io::json_given(rf, "json_schema");
    if (js == nullptr || !js->is_object()) bad(p, "response_format.json_schema must be an object {name, schema, strict}");
    if (const Json* n = io::json_given(*js, "name"); n && !n->is_string())
      bad(p, "response_format.json_schema.name must be a string");
    if (const Json* s = io::json_given(*js, "strict"); s && !s->is_boolean())
      bad(p, "response_format.json_schema.strict must be a boolean");
    const Json* schema = io::json_given(*js, "schema");
    if (schema == nullptr) bad(p, "response_format.json_schema.schema is missing: the JSON schema of the output");
    return structured::GrammarSpec{Kind::kJsonSchema, schema_text(*schema, p, "response_format.json_schema.schema"), {}, true};
  }
  if (t == "structural_tag") return structured::GrammarSpec{Kind::kStructuralTag, dump(rf), {}, true};
  bad(p, "response_format.type must be \"text\", \"json_object\", \"json_schema\" or \"structural_tag\", not \"" + t + "\"");
}

// The constraint structured_outputs gives (none: it sets options only, for response_format's).
std::optional<structured::GrammarSpec> structured_outputs(const Json& so, bool& any_whitespace) {
  const std::string p = "structured_outputs";
  if (!so.is_object()) bad(p, "structured_outputs must be an object, not " + kind_of(so));
  std::vector<structured::GrammarSpec> got;
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    const std::string at = "structured_outputs." + key;
    if (key == "json") {
      got.push_back({Kind::kJsonSchema, schema_text(v, p, at), {}, true});
    } else if (key == "regex" || key == "grammar" || key == "structural_tag") {
      if (!v.is_string()) bad(p, at + " must be a string, not " + kind_of(v));
      const Kind k = key == "regex" ? Kind::kRegex : key == "grammar" ? Kind::kGrammar : Kind::kStructuralTag;
      got.push_back({k, v.get<std::string>(), {}, true});
    } else if (key == "choice") {
      if (!v.is_array() || v.empty()) bad(p, at + " must be a non-empty list of strings");
      structured::GrammarSpec s{Kind::kChoice, "", {}, true};
      for (const Json& c : v) {
        if (!c.is_string()) bad(p, at + " must hold strings only, found " + kind_of(c));
        s.choices.push_back(c.get<std::string>());
      }
      got.push_back(std::move(s));
    } else if (key == "json_object") {
      if (!v.is_boolean()) bad(p, at + " must be a boolean");
      if (v.get<bool>()) got.push_back({Kind::kJsonObject, "", {}, true});
    } else if (key == "disable_any_whitespace") {
      if (!v.is_boolean()) bad(p, at + " must be a boolean");
      any_whitespace = !v.get<bool>();
    } else if (key == "disable_fallback") {
      if (!v.is_boolean()) bad(p, at + " must be a boolean");  // one backend (xgrammar): nothing to fall back to
    } else if (key == "whitespace_pattern" || key == "disable_additional_properties" || key == "backend" ||
               key == "_backend") {
      bad(p, at + " is not supported by fp8lm (xgrammar compiles every constraint; JSON objects take the "
                  "properties their schema allows)");
    } else {
      bad(p, at + " is not a structured_outputs field (json, regex, choice, grammar, json_object, structural_tag, "
                  "disable_any_whitespace)");
    }
  }
  if (got.size() > 1)
    bad(p, "structured_outputs must give exactly one of json, regex, choice, grammar, json_object, structural_tag (" +
               std::to_string(got.size()) + " given)");
  if (got.empty()) return std::nullopt;
  return got.front();
}

// `spec` as one format of a structural tag.
Json as_format(const structured::GrammarSpec& spec, const std::string& param) {
  using K = structured::GrammarSpec::Kind;
  auto json_format = [&](Json schema) {
    Json f = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
    if (!spec.any_whitespace) f["max_whitespace_cnt"] = 1;
    return f;
  };
  switch (spec.kind) {
    case K::kJsonObject: return json_format(Json{{"type", "object"}});
    case K::kJsonSchema: return json_format(parse_json_text(spec.text, "the JSON schema", param));
    case K::kRegex: return Json{{"type", "regex"}, {"pattern", spec.text}};
    case K::kGrammar: return Json{{"type", "grammar"}, {"grammar", spec.text}};
    case K::kChoice: {
      try {
        return Json{{"type", "grammar"}, {"grammar", structured::choice_grammar(spec.choices)}};
      } catch (const Error& e) {
        bad(param, e.what());
      }
    }
    case K::kStructuralTag: {
      const Json tag = parse_json_text(spec.text, "the structural tag", param);
      if (const Json* f = io::json_given(tag, "format")) return *f;
      bad(param, "a structural tag in the older structures/triggers form cannot follow a reasoning model's thinking "
                 "(--reasoning-parser): give it as {\"type\": \"structural_tag\", \"format\": …}");
    }
  }
  bad(param, "unknown constraint");
}

}  // namespace

structured::GrammarSpec after_reasoning(const structured::GrammarSpec& spec, ReasoningParser parser,
                                        const std::string& param) {
  const Json c = as_format(spec, param);
  const Json ws = {{"type", "regex"}, {"pattern", "\\s{0,2}"}};
  Json format;
  if (parser == ReasoningParser::kQwen3) {
    const Json think = {{"type", "tag"}, {"begin", "<think>"}, {"content", {{"type", "any_text"}}}, {"end", "</think>"}};
    format = {{"type", "or"}, {"elements", Json::array({Json{{"type", "sequence"}, {"elements", Json::array({think, ws, c})}}, c})}};
  } else {
    const Json think = {{"type", "tag"}, {"begin", ""}, {"content", {{"type", "any_text"}}}, {"end", "</think>"}};
    format = {{"type", "sequence"}, {"elements", Json::array({think, ws, c})}};
  }
  return {structured::GrammarSpec::Kind::kStructuralTag, dump(Json{{"type", "structural_tag"}, {"format", format}}), {},
          spec.any_whitespace};
}

bool reasoning_ended(const std::string& prompt) {
  const size_t open = prompt.rfind("<think>");
  return open != std::string::npos && prompt.find("</think>", open) != std::string::npos;
}

std::optional<StructuredRequest> parse_structured_outputs(const Json& body) {
  // vLLM's older per-field names: named, with the field that replaced them.
  for (const char* old : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
                          "guided_whitespace_pattern"})
    if (io::json_given(body, old) != nullptr)
      bad(old, std::string(old) + " is not supported by fp8lm: use structured_outputs (vLLM's field since 0.10) or "
                                  "response_format");
  std::optional<StructuredRequest> r;
  bool any_whitespace = true;  // vLLM's default
  if (const Json* rf = io::json_given(body, "response_format"))
    if (auto s = response_format(*rf)) r = StructuredRequest{std::move(*s), "response_format"};
  if (const Json* so = io::json_given(body, "structured_outputs")) {
    std::optional<structured::GrammarSpec> s = structured_outputs(*so, any_whitespace);
    if (s && r) bad("structured_outputs", "give the constraint in response_format or in structured_outputs, not both");
    if (s) r = StructuredRequest{std::move(*s), "structured_outputs"};
    else if (!r)
      bad("structured_outputs", "structured_outputs gives no constraint: one of json, regex, choice, grammar, "
                                "json_object, structural_tag (or response_format's)");
  }
  if (r) r->spec.any_whitespace = any_whitespace;
  return r;
}

}  // namespace fp8lm::server
