// One entry of a format's module list (compressed-tensors `targets`/`ignore`,
// HF `modules_to_not_convert`, ModelOpt `exclude_modules`, `--keep-bf16`),
// matched against a module name such as "model.layers.0.self_attn.q_proj".
// Each format has its own matching rules; they follow what vLLM does when it
// reads the same checkpoint (docs/checkpoints.md, "Module lists").
#pragma once

#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <string_view>

namespace fp8lm::io {

enum class PatternStyle : uint8_t {
  // compressed-tensors: "re:<regex>" (Python re.match: anchored at the start
  // only), the class name "Linear" (every linear module), else the exact name.
  kCompressedTensors,
  // HF "fp8" and FBGEMM lists (vLLM is_layer_skipped): the exact name, or a
  // module inside the named one; MoE experts are skipped as a whole layer
  // when an entry names any expert of that layer (vLLM fuses them).
  kModuleList,
  // ModelOpt `exclude_modules` / `ignore`: exact, substring, or fnmatch wildcard.
  kModelOpt,
  // --keep-bf16: "re:<regex>" as compressed-tensors, else the exact name or an ancestor.
  kKeepList,
};

class ModulePattern {
 public:
  // Throws fp8lm::Error naming `where` for an invalid regex or an empty entry.
  ModulePattern(std::string_view entry, PatternStyle style, const std::string& where);

  bool matches(std::string_view module) const;
  // How specific the match is (compressed-tensors picks the most specific
  // target): 3 exact name, 2 regex, 1 class name. 0 when it does not match.
  int match_rank(std::string_view module) const;

  const std::string& text() const { return text_; }
  PatternStyle style() const { return style_; }
  bool operator==(const ModulePattern& o) const { return text_ == o.text_ && style_ == o.style_; }

 private:
  enum class Kind : uint8_t { kExact, kRegex, kClassLinear };
  std::string text_;
  PatternStyle style_;
  Kind kind_ = Kind::kExact;
  std::shared_ptr<const std::regex> regex_;  // shared: patterns are copied freely
};

// Python fnmatch.fnmatchcase: '*', '?', '[seq]', '[!seq]'; no special case for '.'.
bool fnmatch(std::string_view name, std::string_view pattern);

}  // namespace fp8lm::io
