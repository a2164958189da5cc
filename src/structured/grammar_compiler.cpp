#include "structured/grammar_compiler.h"

#include <chrono>
#include <cstdio>
#include <new>
#include <variant>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "structured/library_warnings.h"
#include "structured/xgrammar_handles.h"

namespace fp8lm::structured {

CompiledGrammar::CompiledGrammar(std::unique_ptr<GrammarHandle> handle, int64_t vocab_size)
    : handle_(std::move(handle)), vocab_size_(vocab_size) {}
CompiledGrammar::~CompiledGrammar() = default;
int64_t CompiledGrammar::memory_bytes() const { return int64_t(handle_->grammar.MemorySizeBytes()); }

std::string CompiledGrammar::serialize() const { return handle_->grammar.SerializeJSON(); }

std::shared_ptr<const CompiledGrammar> CompiledGrammar::deserialize(const std::string& json,
                                                                    const GrammarVocabulary& vocabulary) {
  auto r = xgrammar::CompiledGrammar::DeserializeJSON(json, vocabulary.handle().info);
  if (auto* e = std::get_if<xgrammar::SerializationError>(&r))
    throw Error(std::string("structured outputs: not a compiled grammar of this vocabulary: ") +
                std::visit([](const auto& x) { return std::string(x.what()); }, *e));
  return std::make_shared<const CompiledGrammar>(
      std::make_unique<GrammarHandle>(GrammarHandle{std::move(std::get<xgrammar::CompiledGrammar>(r))}),
      vocabulary.vocab_size());
}

// xgrammar's own cache is off: this class keeps its own, which it can count and bound.
struct GrammarCompiler::Library {
  xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(const GrammarVocabulary& vocabulary, int threads, int64_t cache_bytes)
    : vocabulary_(vocabulary),
      library_(std::make_unique<Library>(Library{xgrammar::GrammarCompiler(vocabulary.handle().info, threads, false)})),
      cache_bytes_(cache_bytes) {}

GrammarCompiler::~GrammarCompiler() = default;

namespace {

// xgrammar's message says what is wrong and where in the spec; its log prefix ("[time] its source
// file:line: ") and its call stack say nothing to a client.
std::string library_message(std::string m) {
  if (const size_t nl = m.find("\nStack trace"); nl != std::string::npos) m.resize(nl);
  // "[hh:mm:ss] path/file.cc:123: message" → "message"
  if (!m.empty() && m[0] == '[') {
    const size_t close = m.find("] ");
    const size_t space = close == std::string::npos ? close : m.find(' ', close + 2);
    size_t colon = close == std::string::npos ? close : m.find(':', close + 2);
    while (colon != std::string::npos && colon < space) {
      size_t d = colon + 1;
      while (d < m.size() && m[d] >= '0' && m[d] <= '9') ++d;
      if (d > colon + 1 && m.compare(d, 2, ": ") == 0) {
        m.erase(0, d + 2);
        break;
      }
      colon = m.find(':', colon + 1);
    }
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

// JSON Schema keywords xgrammar's converter skips without a word (its warnings for them are off):
// a schema using one is refused, since its outputs would not be checked against it.
constexpr const char* kUnsupportedKeywords[] = {"not",         "if",       "then",        "else",
                                                "dependentRequired", "dependentSchemas", "uniqueItems",
                                                "contains",    "minContains", "maxContains"};

// Calendar dates exactly (xgrammar's "date" pattern takes any day 01-31 of any month, and year
// 0000): 31-day months, 30-day months, February to the 28th, February 29th of leap years (multiples
// of 4 but not of 100, and multiples of 400), years 0001-9999 as Python's datetime.date.
constexpr const char* kDate =
    "(([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|"
    "(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|"
    "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26]|0[48])00)-02-29)";
// xgrammar's time of day and offset, after a date.
constexpr const char* kTime = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";

// Walks the subschemas of `s` (the keywords whose values are schemas, or maps or lists of them),
// refusing the first unsupported keyword with its JSON pointer, and replacing "format": "date" /
// "date-time" (without a pattern of their own) by the exact calendar pattern. Property names are
// data, not keywords: a property called "not" is fine.
void prepare_schema(nlohmann::ordered_json& s, const std::string& at, int depth) {
  if (depth > 128) throw Error("json_schema: nested deeper than 128 subschemas at #" + at);
  if (!s.is_object()) return;
  if (s.contains("format") && s["format"].is_string() && !s.contains("pattern")) {
    const std::string f = s["format"];
    if (f == "date" || f == "date-time") {
      s["pattern"] = std::string("^") + kDate + (f == "date" ? "" : std::string("T") + kTime) + "$";
      s.erase("format");
    }
  }
  for (const char* k : kUnsupportedKeywords)
    if (s.contains(k) && !(std::string(k) == "uniqueItems" && s[k] == false))
      throw Error(std::string("json_schema: the keyword \"") + k + "\" at #" + at +
                  " is not supported by fp8lm's grammar library (xgrammar " + "would not enforce it)");
  for (const char* k : {"items", "additionalProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
                        "additionalItems"})
    if (s.contains(k)) prepare_schema(s[k], at + "/" + k, depth + 1);
  for (const char* k : {"properties", "patternProperties", "$defs", "definitions"})
    if (s.contains(k) && s[k].is_object())
      for (auto& [name, sub] : s[k].items()) prepare_schema(sub, at + "/" + k + "/" + name, depth + 1);
  for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems", "items"})
    if (s.contains(k) && s[k].is_array())
      for (size_t i = 0; i < s[k].size(); ++i) prepare_schema(s[k][i], at + "/" + k + "/" + std::to_string(i), depth + 1);
}

// Every {"json_schema": …} of a structural tag's formats, prepared as prepare_schema does.
void prepare_tag_schemas(nlohmann::ordered_json& j, int depth) {
  if (depth > 128) throw Error("structural_tag: nested deeper than 128 levels");
  if (j.is_object()) {
    for (auto& [key, v] : j.items()) {
      if (key == "json_schema" && v.is_object()) prepare_schema(v, "", 0);
      else prepare_tag_schemas(v, depth + 1);
    }
  } else if (j.is_array()) {
    for (auto& v : j) prepare_tag_schemas(v, depth + 1);
  }
}

std::string cache_key(const GrammarSpec& s) {
  std::string k = std::string(kind_name(s.kind)) + (s.any_whitespace ? "\x01" : "\x02");
  k += s.text;
  for (const std::string& c : s.choices) {
    k += '\0';
    k += std::to_string(c.size()) + ':' + c;
  }
  return k;
}

}  // namespace

std::shared_ptr<const CompiledGrammar> GrammarCompiler::build(const GrammarSpec& spec) {
  xgrammar::GrammarCompiler& c = library_->compiler;
  const char* what = kind_name(spec.kind);
  // A JSON schema, and a structural tag's schemas (tool parameters), prepared before compiling.
  std::string text = spec.text;
  if (spec.kind == GrammarSpec::Kind::kJsonSchema || spec.kind == GrammarSpec::Kind::kStructuralTag) {
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(spec.text);
    } catch (const std::exception& e) {
      throw Error(std::string(what) + ": not JSON: " + e.what());
    }
    if (spec.kind == GrammarSpec::Kind::kJsonSchema) prepare_schema(j, "", 0);
    else prepare_tag_schemas(j, 0);
    text = j.dump();
  }
  // Compact JSON (vLLM's disable_any_whitespace): these separators and no other whitespace.
  const auto separators = spec.any_whitespace ? std::nullopt
                                              : std::optional(std::pair<std::string, std::string>(", ", ": "));
  LibraryWarnings warnings;  // a constraint the library would drop is refused (below)
  try {
    auto compiled = [&]() -> xgrammar::CompiledGrammar {
      switch (spec.kind) {
        case GrammarSpec::Kind::kJsonObject:
          // Any JSON object: the schema {"type": "object"}, not strict, so any properties.
          return c.CompileJSONSchema(R"({"type": "object"})", spec.any_whitespace, std::nullopt, separators, false);
        case GrammarSpec::Kind::kJsonSchema:
          return c.CompileJSONSchema(text, spec.any_whitespace, std::nullopt, separators, true);
        case GrammarSpec::Kind::kRegex: return c.CompileRegex(spec.text);
        case GrammarSpec::Kind::kChoice: return c.CompileGrammar(choice_grammar(spec.choices));
        case GrammarSpec::Kind::kGrammar: return c.CompileGrammar(spec.text);
        case GrammarSpec::Kind::kStructuralTag: return c.CompileStructuralTag(text);
      }
      throw Error("structured outputs: unknown grammar kind");
    }();
    if (!warnings.messages().empty()) {
      std::string m = std::string(what) + ": not supported by fp8lm's grammar library (xgrammar would not enforce it): ";
      for (size_t i = 0; i < warnings.messages().size(); ++i) m += (i > 0 ? "; " : "") + warnings.messages()[i];
      throw Error(m);
    }
    return std::make_shared<const CompiledGrammar>(
        std::make_unique<GrammarHandle>(GrammarHandle{std::move(compiled)}), vocabulary_.vocab_size());
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;  // not the spec's fault: a memory bound (a worker's RLIMIT_DATA) or the machine's
  } catch (const std::exception& e) {
    throw Error(std::string(what) + ": " + library_message(e.what()));
  }
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec) {
  return compile(spec, [this](const GrammarSpec& s) { return build(s); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec, const Builder& builder) {
  const std::string key = cache_key(spec);
  std::promise<std::shared_ptr<const CompiledGrammar>> mine;
  Result result;
  {
    std::lock_guard lock(mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      ++stats_.cache_hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      result = it->second.result;
    } else {
      lru_.push_front(key);
      cache_.emplace(key, Entry{mine.get_future().share(), lru_.begin(), 0});
    }
  }
  if (result.valid()) return result.get();  // compiled, or being compiled by another thread (its error too)

  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = builder(spec);
  } catch (...) {
    mine.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    ++stats_.failures;
    if (auto it = cache_.find(key); it != cache_.end()) {  // a refused spec is not kept: it costs its compile again
      lru_.erase(it->second.lru);
      cache_.erase(it);
    }
    throw;
  }
  mine.set_value(g);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mutex_);
  ++stats_.compilations;
  stats_.compile_seconds += seconds;
  if (auto it = cache_.find(key); it != cache_.end()) {
    it->second.bytes = g->memory_bytes();
    stats_.cached_bytes += it->second.bytes;
    evict_locked();
  }
  return g;
}

// Least recently used first, never one still compiling (bytes 0), never the newest alone.
void GrammarCompiler::evict_locked() {
  for (auto it = lru_.end(); stats_.cached_bytes > cache_bytes_ && it != lru_.begin();) {
    --it;
    auto e = cache_.find(*it);
    if (e->second.bytes == 0) continue;
    stats_.cached_bytes -= e->second.bytes;
    cache_.erase(e);
    it = lru_.erase(it);
  }
}

GrammarCompiler::Stats GrammarCompiler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace fp8lm::structured
