// Added tokens (special ones like <|im_start|> and plain added ones): found in
// the text before normalization and pre-tokenization and never split further.
// Matching is leftmost-longest, as Hugging Face's Aho-Corasick search;
// lstrip/rstrip absorb neighbouring whitespace, single_word needs word
// boundaries, and `normalized` tokens are matched in normalized text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/vocab.h"

namespace fp8lm::tokenizer {

struct AddedToken {
  std::uint32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A span of text: an added token (id set) or text still to be tokenized.
struct TextSpan {
  std::size_t start, end;
  std::optional<std::uint32_t> id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  AddedVocabulary(const nlohmann::json& list, const JsonPath& at);

  // Splits `text` on the tokens with normalized == `normalized_set`.
  std::vector<TextSpan> split(std::string_view text, bool normalized_set) const;

  const AddedToken* find(std::uint32_t id) const;
  std::optional<std::uint32_t> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // A byte trie per matching set; walked from every candidate start position.
  struct Trie {
    struct Node {
      std::unordered_map<unsigned char, std::uint32_t> children;
      std::int64_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view s, std::size_t token_index);
    // Longest token starting at `pos`: its index and length, or -1.
    std::int64_t longest(std::string_view text, std::size_t pos, std::size_t& length) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::uint32_t, std::size_t> by_id_;
  TokenMap by_content_;
  Trie raw_, normalized_;
};

}  // namespace fp8lm::tokenizer
