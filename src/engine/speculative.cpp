#include "engine/speculative.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/error.h"
#include "io/json_file.h"

namespace fp8lm::engine {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw Error("--speculative-config: " + why); }

// What the user wrote, cut short for an error message.
std::string cut(std::string s) {
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}
std::string shown(const nlohmann::json& v) { return cut(v.dump()); }

int int_field(const nlohmann::json& j, const char* key, int lo, int hi) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) refuse(std::string("\"") + key + "\" must be an integer, got " + shown(v));
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi)
    refuse(std::string("\"") + key + "\" " + std::to_string(n) + " is outside " + std::to_string(lo) + " … " +
           std::to_string(hi));
  return int(n);
}

}  // namespace

SpeculativeConfig parse_speculative_config(std::string_view text) {
  // io::parse_json bounds the nesting (a deep value would overflow the stack in dump()).
  const nlohmann::json j = io::parse_json(text, "--speculative-config");
  if (!j.is_object()) refuse("expected a JSON object, got " + shown(j));
  // What vLLM's SpeculativeConfig takes that fp8lm does not run yet is refused by name, never
  // ignored: EAGLE / EAGLE-3 heads, MTP, and the knobs that go with them.
  static const char* const kKnown[] = {"method",           "num_speculative_tokens", "prompt_lookup_min",
                                      "prompt_lookup_max", "disable_by_batch_size",  "model",
                                      "quantization"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKnown), std::end(kKnown), key) != std::end(kKnown)) continue;
    refuse("\"" + cut(key) +
           "\" is not a key fp8lm implements (it takes method, model, quantization, num_speculative_tokens, "
           "prompt_lookup_min, prompt_lookup_max, disable_by_batch_size)");
  }
  SpeculativeConfig c;
  auto string_field = [&](const char* key) {
    if (!j[key].is_string()) refuse(std::string("\"") + key + "\" must be a string, got " + shown(j[key]));
    return j[key].get<std::string>();
  };
  // The directory of method `name`'s model (`what`: what it holds), and no n-gram key (`drafter`
  // takes none).
  auto model_dir = [&](const char* name, const char* what, const char* drafter) {
    if (!j.contains("model")) refuse(std::string("method \"") + name + "\" needs \"model\": " + what);
    c.model = string_field("model");
    if (c.model.empty()) refuse("\"model\" is empty");
    for (const char* key : {"prompt_lookup_min", "prompt_lookup_max"})
      if (j.contains(key)) refuse(std::string("\"") + key + "\" is the n-gram drafter's; " + drafter + " takes none");
  };
  // vLLM: a "model" without a method is a draft model ("draft_model"); "ngram" takes none.
  std::string method = j.contains("method") ? string_field("method") : j.contains("model") ? "draft_model" : "";
  if (method.empty()) refuse("\"method\" is missing (\"ngram\", or a draft \"model\", is what fp8lm implements)");
  if (method == "ngram" || method == "[ngram]") {
    if (j.contains("model")) refuse("\"model\" with method \"ngram\": prompt lookup uses no model");
    if (j.contains("quantization")) refuse("\"quantization\" with method \"ngram\": prompt lookup uses no model");
  } else if (method == "draft_model") {
    c.method = SpeculativeConfig::Method::kDraftModel;
    model_dir("draft_model", "the draft model's directory", "a draft model");
    if (j.contains("quantization")) c.quantization = string_field("quantization");
  } else if (method == "eagle3") {
    c.method = SpeculativeConfig::Method::kEagle3;
    model_dir("eagle3", "the EAGLE-3 head's directory", "an EAGLE-3 head");
    if (j.contains("quantization"))
      refuse("\"quantization\" with method \"eagle3\": the head runs in the target's activation type as stored");
  } else {
    refuse("method \"" + cut(method) + "\" is not implemented (\"ngram\", \"draft_model\" and \"eagle3\" are)");
  }
  if (!j.contains("num_speculative_tokens")) refuse("\"num_speculative_tokens\" is missing");
  c.num_speculative_tokens = int_field(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens);
  // vLLM's defaults: neither given, both 5; one given, the other the same.
  const std::optional<int> lo =
      j.contains("prompt_lookup_min") ? std::optional<int>(int_field(j, "prompt_lookup_min", 1, 1024)) : std::nullopt;
  const std::optional<int> hi =
      j.contains("prompt_lookup_max") ? std::optional<int>(int_field(j, "prompt_lookup_max", 1, 1024)) : std::nullopt;
  c.prompt_lookup_min = lo.value_or(hi.value_or(5));
  c.prompt_lookup_max = hi.value_or(lo.value_or(5));
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    refuse("prompt_lookup_min " + std::to_string(c.prompt_lookup_min) + " is above prompt_lookup_max " +
           std::to_string(c.prompt_lookup_max));
  // vLLM takes it from 2 on: at 1 a lone request would never speculate.
  if (j.contains("disable_by_batch_size"))
    c.disable_by_batch_size = int_field(j, "disable_by_batch_size", 2, 1 << 20);
  return c;
}

Drafter& resolve_drafter(const SpeculativeConfig& config, Drafter* given, std::unique_ptr<Drafter>& own) {
  if (given != nullptr) return *given;
  if (config.method != SpeculativeConfig::Method::kNgram)
    throw Error("internal: speculative decoding with a draft model or an EAGLE-3 head needs the loaded drafter");
  own = std::make_unique<NgramDrafter>(config);
  return *own;
}

void NgramDrafter::draft(std::span<Request> requests) {
  for (Request& r : requests) {
    r.draft = ngram_draft(r.tokens, config_);
    if (int64_t(r.draft.size()) > r.max_tokens) r.draft.resize(size_t(std::max(r.max_tokens, 0)));
  }
}

std::vector<int32_t> ngram_draft(std::span<const int32_t> tokens, const SpeculativeConfig& config) {
  const auto len = int64_t(tokens.size());
  const int k = config.num_speculative_tokens;
  for (int64_t n = std::min<int64_t>(config.prompt_lookup_max, len - 1); n >= config.prompt_lookup_min; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size_t(len - n));
    // The latest earlier occurrence: the one whose continuation is the most recent text.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n, to = std::min(len, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

DraftVerdict verify_drafted_token(std::span<const float> p, int32_t draft, double u_accept, double u_resample) {
  if (draft < 0 || size_t(draft) >= p.size())
    throw Error("speculative decoding: drafted token " + std::to_string(draft) + " is outside the vocabulary of " +
                std::to_string(p.size()));
  const double keep = p[size_t(draft)];
  if (u_accept < keep) return {true, draft};
  // The residual, in id order: the inverse CDF of p without the draft (in double, over its mass).
  double mass = 0.0;
  for (size_t i = 0; i < p.size(); ++i)
    if (int32_t(i) != draft) mass += double(p[i]);
  if (!(mass > 0.0)) return {true, draft};
  const double target = u_resample * mass;
  double cdf = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (int32_t(i) == draft || p[i] <= 0.0f) continue;
    cdf += double(p[i]);
    last = int32_t(i);
    if (target < cdf) return {false, last};
  }
  return {false, last};  // u at the top of the CDF, within rounding: the last token in play
}

VerifiedDraft verify_draft_rows(const Sampler& sampler, std::span<float> logits, std::span<const int32_t> draft) {
  if (draft.empty() || logits.size() % (draft.size() + 1) != 0)
    throw Error("speculative decoding: " + std::to_string(logits.size()) + " logits for a draft of " +
                std::to_string(draft.size()));
  const size_t vocab = logits.size() / (draft.size() + 1);
  VerifiedDraft v;
  Sampler lookahead = sampler;  // the draws and the penalties' counts of the tokens this step keeps
  for (size_t i = 0; i <= draft.size(); ++i) {
    const std::span<float> row = logits.subspan(i * vocab, vocab);
    if (i == draft.size()) {
      v.tokens.push_back(lookahead.sample(row));
      break;
    }
    const std::vector<float> p = lookahead.probabilities(row);
    const DraftVerdict d = verify_drafted_token(p, draft[i], lookahead.row_sampling().uniform, lookahead.second_uniform());
    v.tokens.push_back(d.token);
    lookahead.accept(d.token);
    if (!d.accepted) break;
    ++v.accepted;
  }
  return v;
}

int accepted_prefix(std::span<const int32_t> draft, std::span<const int32_t> verified) {
  if (verified.size() != draft.size() + 1)
    throw Error("speculative decoding: " + std::to_string(verified.size()) + " verified tokens for a draft of " +
                std::to_string(draft.size()));
  int a = 0;
  while (size_t(a) < draft.size() && draft[size_t(a)] == verified[size_t(a)]) ++a;
  return a;
}

void SpeculativeStats::add(int drafted_now, int accepted_now) {
  ++steps;
  drafted += drafted_now;
  accepted += accepted_now;
  if (reached.size() < size_t(drafted_now)) {
    reached.resize(size_t(drafted_now), 0);
    accepted_at.resize(size_t(drafted_now), 0);
  }
  for (int i = 0; i < drafted_now && i <= accepted_now; ++i) {
    ++reached[size_t(i)];
    if (i < accepted_now) ++accepted_at[size_t(i)];
  }
}

}  // namespace fp8lm::engine
