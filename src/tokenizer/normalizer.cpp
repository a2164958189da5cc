#include "tokenizer/normalizer.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

#include <utf8proc.h>

#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    // ASCII is invariant under every normalization form: skip the copy.
    bool ascii = true;
    for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                static_cast<utf8proc_ssize_t>(text.size()), &out,
                                static_cast<utf8proc_option_t>(options_));
    if (n < 0) throw Error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    std::free(out);
  }
  // A code point (<= 4 bytes) maps to at least one code point (>= 1 byte), and
  // composition joins at most 4 code points (the longest canonical
  // decomposition, Unicode 15) into one: at most 16 bytes become 1.
  double max_shrink() const override { return 16.0; }

 private:
  int options_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      const char32_t c = utf8::next(text, i);
      if (c == 0x130) {  // full lowercase mapping of 'İ' is two code points, as Rust's
        out += "i\xCC\x87";
        continue;
      }
      utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
    text = std::move(out);
  }
  double max_shrink() const override { return 4.0; }  // one code point (<= 4 bytes) to at least one (>= 1 byte)
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }
  // A regex match has no length bound; a literal one is replaced by content_.
  double max_shrink() const override {
    if (!pattern_.is_literal() || content_.empty()) return std::numeric_limits<double>::infinity();
    return std::max(1.0, double(pattern_.literal().size()) / double(content_.size()));
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }
  double max_shrink() const override { return 1.0; }

 private:
  std::string prefix_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t i = begin;
        if (!utf8::is_whitespace(utf8::next(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t i = end;
        if (!utf8::is_whitespace(utf8::prev(text, i))) break;
        end = i;
      }
    }
    text = text.substr(begin, end - begin);
  }
  double max_shrink() const override { return std::numeric_limits<double>::infinity(); }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }
  double max_shrink() const override {
    double f = 1.0;
    for (const auto& p : parts_) f *= p->max_shrink();
    return f;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const JsonPath& at) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, at);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(make_pattern(json_field(spec, "pattern", at), at / "pattern"),
                                               json_string(spec, "content", at));
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(json_string(spec, "prepend", at));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(json_bool_or(spec, "strip_left", at, true),
                                             json_bool_or(spec, "strip_right", at, true));
  if (type == "Sequence") {
    const auto& list = json_field(spec, "normalizers", at);
    if (!list.is_array()) (at / "normalizers").fail("must be an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_normalizer(list[i], (at / "normalizers")[i])) parts.push_back(std::move(p));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  (at / "type").fail("unsupported normalizer type '" + type + "'");
}

}  // namespace fp8lm::tokenizer
