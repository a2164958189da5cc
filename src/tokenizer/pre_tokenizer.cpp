#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/split_behavior.h"
#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

namespace {

// Refines every piece with `split`, which appends the sub-pieces of one text.
// A sub-piece is "at_start" when it is the first of a piece that was.
template <typename F>
void refine(std::vector<PreToken>& pieces, F&& split) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  std::vector<std::string> parts;
  for (auto& piece : pieces) {
    parts.clear();
    split(piece.text, parts);
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (!parts[i].empty()) out.push_back({std::move(parts[i]), piece.at_start && i == 0});
  }
  pieces = std::move(out);
}

// Segments of `text` where each code point for which `pred` holds is a match.
template <typename Pred>
std::vector<Segment> char_segments(std::string_view text, Pred&& pred) {
  std::vector<Segment> segs;
  std::size_t prev = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t start = i;
    if (pred(utf8::next(text, i))) {
      if (prev < start) segs.push_back({prev, start, false});
      segs.push_back({start, i, true});
      prev = i;
    }
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), false});
  return segs;
}

std::vector<Segment> pattern_segments(std::string_view text, const Pattern& pattern, bool invert) {
  std::vector<Segment> segs;
  std::size_t prev = 0;
  pattern.for_each_match(text, [&](std::size_t start, std::size_t end) {
    if (prev < start) segs.push_back({prev, start, invert});
    segs.push_back({start, end, !invert});
    prev = end;
  });
  if (prev < text.size()) segs.push_back({prev, text.size(), invert});
  return segs;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    refine(pieces, [&](const std::string& text, std::vector<std::string>& out) {
      split_segments(text, pattern_segments(text, pattern_, invert_), behavior_, out);
    });
  }
  bool keeps_text() const override { return behavior_ != SplitBehavior::kRemoved; }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const JsonPath& at)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex)
      regex_ = std::make_unique<Pattern>(
          std::string(), std::make_shared<const Regex>(byte_level::kGpt2Pattern, at.file + ": " + at.path));
  }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * (regex_ ? 4 : 1));
    std::vector<std::string> parts;
    for (auto& piece : pieces) {
      if (add_prefix_space_ && piece.text.front() != ' ') piece.text.insert(0, " ");
      parts.clear();
      if (regex_)
        split_segments(piece.text, pattern_segments(piece.text, *regex_, false), SplitBehavior::kIsolated, parts);
      else
        parts.push_back(std::move(piece.text));
      for (std::size_t i = 0; i < parts.size(); ++i) {
        if (parts[i].empty()) continue;
        PreToken t{{}, piece.at_start && i == 0};
        t.text.reserve(parts[i].size() * 2);
        byte_level::encode(parts[i], t.text);
        out.push_back(std::move(t));
      }
    }
    pieces = std::move(out);
  }
  bool keeps_text() const override { return true; }  // every byte becomes a 1- or 2-byte character
  bool byte_level() const override { return true; }
  bool rewrites() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Pattern> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    const Pattern space(" ", nullptr);
    const Pattern marker(replacement_, nullptr);
    refine(pieces, [&](const std::string& text, std::vector<std::string>& out) {
      out.push_back(space.replace_all(text, replacement_));
    });
    // Prepending depends on each piece's position, so it runs over the pieces.
    for (auto& p : pieces) {
      const bool has = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!has && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start)))
        p.text.insert(0, replacement_);
    }
    if (split_)
      refine(pieces, [&](const std::string& text, std::vector<std::string>& out) {
        split_segments(text, pattern_segments(text, marker, false), SplitBehavior::kMergedWithNext, out);
      });
  }
  bool keeps_text() const override { return true; }  // ' ' becomes a whole character (>= 1 byte)
  bool rewrites() const override { return true; }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Splits on a per-code-point predicate (WhitespaceSplit, Digits, Punctuation).
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(std::function<bool(char32_t)> pred, SplitBehavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    refine(pieces, [&](const std::string& text, std::vector<std::string>& out) {
      split_segments(text, char_segments(text, pred_), behavior_, out);
    });
  }
  bool keeps_text() const override { return behavior_ != SplitBehavior::kRemoved; }

 private:
  std::function<bool(char32_t)> pred_;
  SplitBehavior behavior_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }
  bool keeps_text() const override {
    return std::all_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->keeps_text(); });
  }
  // Byte-level when a ByteLevel step spells it and no other step rewrites characters.
  bool byte_level() const override {
    bool found = false;
    for (const auto& p : parts_) {
      if (p->byte_level()) found = true;
      else if (p->rewrites()) return false;
    }
    return found;
  }
  bool rewrites() const override {
    return std::any_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->rewrites(); });
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

PrependScheme parse_prepend_scheme(const nlohmann::json& spec, const JsonPath& at) {
  if (json_has(spec, "prepend_scheme")) {
    const std::string s = json_string(spec, "prepend_scheme", at);
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    (at / "prepend_scheme").fail("unknown prepend_scheme '" + s + "'");
  }
  // Older files carry add_prefix_space instead.
  return json_bool_or(spec, "add_prefix_space", at, true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const JsonPath& at) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, at);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(json_bool_or(spec, "add_prefix_space", at, true),
                                                   json_bool_or(spec, "use_regex", at, true), at);
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(make_pattern(json_field(spec, "pattern", at), at / "pattern"),
                                               parse_split_behavior(json_string(spec, "behavior", at), at / "behavior"),
                                               json_bool_or(spec, "invert", at, false));
  if (type == "Metaspace") {
    const std::string replacement = json_string_or(spec, "replacement", at, "\xE2\x96\x81");
    std::size_t i = 0;
    if (replacement.empty() || !utf8::is_valid(replacement) || (utf8::next(replacement, i), i != replacement.size()))
      (at / "replacement").fail("must be a single character");
    return std::make_unique<MetaspacePreTokenizer>(replacement, parse_prepend_scheme(spec, at),
                                                   json_bool_or(spec, "split", at, true));
  }
  if (type == "Whitespace") {
    // \w+|[^\w\s]+ keeps words and runs of other non-space characters.
    auto regex = std::make_shared<const Regex>(R"(\w+|[^\w\s]+)", at.file + ": " + at.path);
    return std::make_unique<SplitPreTokenizer>(Pattern({}, regex), SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit")
    return std::make_unique<CharSplitPreTokenizer>(utf8::is_whitespace, SplitBehavior::kRemoved);
  if (type == "Digits")
    return std::make_unique<CharSplitPreTokenizer>(
        utf8::is_numeric,
        json_bool_or(spec, "individual_digits", at, false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  if (type == "Punctuation")
    return std::make_unique<CharSplitPreTokenizer>(
        utf8::is_punctuation, parse_split_behavior(json_string_or(spec, "behavior", at, "Isolated"), at / "behavior"));
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(std::make_unique<CharSplitPreTokenizer>(utf8::is_whitespace, SplitBehavior::kRemoved));
    parts.push_back(std::make_unique<CharSplitPreTokenizer>(utf8::is_punctuation, SplitBehavior::kIsolated));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "Sequence") {
    const auto& list = json_field(spec, "pretokenizers", at);
    if (!list.is_array()) (at / "pretokenizers").fail("must be an array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_pre_tokenizer(list[i], (at / "pretokenizers")[i])) parts.push_back(std::move(p));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  (at / "type").fail("unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace fp8lm::tokenizer
