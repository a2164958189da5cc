#include "io/checkpoint_quantization.h"

namespace fp8lm::io {
namespace {

std::string_view last_component(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

bool never_quantized(std::string_view module) {
  const std::string_view last = last_component(module);
  if (last == "lm_head" || last == "embed_tokens" || ends_with(last, "norm") || ends_with(last, "layernorm"))
    return true;
  // MoE routers: Qwen3-MoE `mlp.gate`, Mixtral `block_sparse_moe.gate`.
  return last == "gate" && (ends_with(module, ".mlp.gate") || ends_with(module, ".block_sparse_moe.gate"));
}

LinearQuantScheme CheckpointQuantization::scheme_for(std::string_view module) const {
  const LinearQuantScheme unquantized;
  if (never_quantized(module)) return unquantized;
  for (const ModulePattern& p : keep_high_precision)
    if (p.matches(module)) return unquantized;
  for (const ModulePattern& p : ignore)
    if (p.matches(module)) return unquantized;
  // compressed-tensors resolves overlapping groups by specificity: an exact
  // name beats a regex, which beats a class name; the first group breaks ties.
  const QuantRule* best = nullptr;
  int best_rank = 0;
  for (const QuantRule& r : rules)
    for (const ModulePattern& t : r.targets) {
      const int rank = t.match_rank(module);
      if (rank > best_rank) {
        best_rank = rank;
        best = &r;
      }
    }
  return best ? best->scheme : unquantized;
}

std::string CheckpointQuantization::describe() const {
  std::string s = format;
  if (!variant.empty()) s += " (" + variant + ")";
  if (online) s += ", quantized online";
  for (const QuantRule& r : rules) s += "; " + r.name + ": " + r.scheme.describe();
  if (!ignore.empty()) {
    s += "; not quantized:";
    for (const ModulePattern& p : ignore) s += " " + p.text();
  }
  if (!keep_high_precision.empty()) {
    s += "; kept in high precision:";
    for (const ModulePattern& p : keep_high_precision) s += " " + p.text();
  }
  if (fp8_embeddings) s += "; embeddings and lm_head: fp8-e4m3 per row (weight-only)";
  s += "; kv cache: " + std::string(name(kv_cache.dtype));
  return s;
}

}  // namespace fp8lm::io
