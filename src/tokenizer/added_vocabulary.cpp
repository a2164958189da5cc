#include "tokenizer/added_vocabulary.h"

#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

void AddedVocabulary::Trie::insert(std::string_view s, std::size_t token_index) {
  std::uint32_t node = 0;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const auto it = nodes[node].children.find(c);
    if (it != nodes[node].children.end()) {
      node = it->second;
    } else {
      nodes.push_back(Node{});
      const auto next = static_cast<std::uint32_t>(nodes.size() - 1);
      nodes[node].children.emplace(c, next);
      node = next;
    }
  }
  // The first of two identical contents wins, as in Hugging Face's map.
  if (nodes[node].token < 0) nodes[node].token = static_cast<std::int64_t>(token_index);
  first_byte[static_cast<unsigned char>(s[0])] = true;
}

std::int64_t AddedVocabulary::Trie::longest(std::string_view text, std::size_t pos, std::size_t& length) const {
  std::int64_t best = -1;
  std::uint32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto it = nodes[node].children.find(static_cast<unsigned char>(text[i]));
    if (it == nodes[node].children.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      length = i + 1 - pos;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(const nlohmann::json& list, const JsonPath& at) {
  if (list.is_null()) return;
  if (!list.is_array()) at.fail("must be an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    const JsonPath here = at[i];
    AddedToken token;
    token.id = json_id(json_field(t, "id", here), here / "id");
    if (token.id > kMaxTokenId) (here / "id").fail("id is too large");
    token.content = json_string(t, "content", here);
    if (token.content.empty()) (here / "content").fail("must not be empty");
    if (!utf8::is_valid(token.content)) (here / "content").fail("is not valid UTF-8");
    token.special = json_bool_or(t, "special", here, false);
    token.normalized = json_bool_or(t, "normalized", here, !token.special);
    token.lstrip = json_bool_or(t, "lstrip", here, false);
    token.rstrip = json_bool_or(t, "rstrip", here, false);
    token.single_word = json_bool_or(t, "single_word", here, false);
    const std::size_t index = tokens_.size();
    by_id_.emplace(token.id, index);
    by_content_.emplace(token.content, token.id);
    (token.normalized ? normalized_ : raw_).insert(token.content, index);
    tokens_.push_back(std::move(token));
  }
}

const AddedToken* AddedVocabulary::find(std::uint32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<std::uint32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

namespace {

bool is_word_char(char32_t c) { return utf8::is_alphanumeric(c) || c == U'_'; }

}  // namespace

std::vector<TextSpan> AddedVocabulary::split(std::string_view text, bool normalized_set) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  std::vector<TextSpan> spans;
  std::size_t done = 0;  // end of the last token taken
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    std::size_t length = 0;
    const std::int64_t index = trie.longest(text, pos, length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<std::size_t>(index)];
    std::size_t start = pos, stop = pos + length;
    pos = stop;  // the search resumes after this match whether it is taken or not
    if (token.single_word) {
      std::size_t b = start, a = stop;
      const bool word_before = start > 0 && is_word_char(utf8::prev(text, b));
      const bool word_after = stop < text.size() && is_word_char(utf8::next(text, a));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      std::size_t s = start;
      while (s > done) {
        std::size_t p = s;
        if (!utf8::is_whitespace(utf8::prev(text, p))) break;
        s = p;
      }
      start = s;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        std::size_t n = stop;
        if (!utf8::is_whitespace(utf8::next(text, n))) break;
        stop = n;
      }
    }
    if (done < start) spans.push_back({done, start, std::nullopt});
    spans.push_back({start, stop, token.id});
    done = stop;
    pos = stop;
  }
  if (done < text.size()) spans.push_back({done, text.size(), std::nullopt});
  return spans;
}

}  // namespace fp8lm::tokenizer

