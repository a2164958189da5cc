#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

namespace {

// Every token whose characters all stand for bytes becomes those bytes; any
// other token (an added one such as <|im_end|>) keeps its own bytes. The whole
// is then read as UTF-8, invalid parts replaced by U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      const std::size_t mark = bytes.size();
      bool all = true;
      for (std::size_t i = 0; i < t.size() && all;) {
        const int b = byte_level::byte_for_char(utf8::next(t, i));
        if (b < 0) all = false;
        else bytes.push_back(static_cast<char>(b));
      }
      if (!all) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8::lossy(bytes));
  }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Runs of <0xXX> tokens become their bytes when those are valid UTF-8, or
// one U+FFFD per byte when not.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    std::size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8::is_valid(pending)) out.push_back(pending);
      else
        for (std::size_t k = 0; k < pending_count; ++k) out.emplace_back(utf8::kReplacementChar);
      pending.clear();
      pending_count = 0;
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && hex_value(t[3]) >= 0 && hex_value(t[4]) >= 0) {
        pending.push_back(static_cast<char>(hex_value(t[3]) * 16 + hex_value(t[4])));
        ++pending_count;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::size_t begin = 0, end = t.size();
      for (std::size_t k = 0; k < start_ && std::string_view(t).substr(begin).starts_with(content_); ++k)
        begin += content_.size();
      for (std::size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                              std::string_view(t).substr(0, end).ends_with(content_);
           ++k)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// ▁ becomes a space; in the first token (when a prefix space was prepended)
// the ▁ are dropped instead.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepends) : replacement_(std::move(replacement)), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const Pattern marker(replacement_, nullptr);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = marker.replace_all(tokens[i], i == 0 && prepends_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool prepends_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const JsonPath& at) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, at);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = json_string(spec, "content", at);
    std::size_t i = 0;
    if (content.empty() || !utf8::is_valid(content) || (utf8::next(content, i), i != content.size()))
      (at / "content").fail("must be a single character");
    return std::make_unique<StripDecoder>(content, json_size_or(spec, "start", at, 0), json_size_or(spec, "stop", at, 0));
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(make_pattern(json_field(spec, "pattern", at), at / "pattern"),
                                            json_string(spec, "content", at));
  if (type == "Metaspace") {
    const std::string replacement = json_string_or(spec, "replacement", at, "\xE2\x96\x81");
    if (replacement.empty()) (at / "replacement").fail("must be a single character");
    bool prepends = json_bool_or(spec, "add_prefix_space", at, true);
    if (json_has(spec, "prepend_scheme")) prepends = json_string(spec, "prepend_scheme", at) != "never";
    return std::make_unique<MetaspaceDecoder>(replacement, prepends);
  }
  if (type == "Sequence") {
    const auto& list = json_field(spec, "decoders", at);
    if (!list.is_array()) (at / "decoders").fail("must be an array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_decoder(list[i], (at / "decoders")[i])) parts.push_back(std::move(p));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  (at / "type").fail("unsupported decoder type '" + type + "'");
}

}  // namespace fp8lm::tokenizer
