// Pre-tokenizers of tokenizer.json: split normalized text into the words the
// BPE model encodes one by one (and, for ByteLevel/Metaspace, rewrite them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"

namespace fp8lm::tokenizer {

struct PreToken {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the input (Metaspace's "first" scheme)
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their refinement; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
  // True when the pieces together never hold fewer bytes than the input
  // (nothing is removed or shortened), for Tokenizer::encode_at_most's bound.
  virtual bool keeps_text() const = 0;
  // True when the pieces are spelled in byte-level characters (GPT-2's table).
  virtual bool byte_level() const { return false; }
  // True when it rewrites characters (ByteLevel, Metaspace), not only splits.
  virtual bool rewrites() const { return false; }
};

// ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits,
// Punctuation, BertPreTokenizer, Sequence; others are an error naming the
// type. Returns nullptr for a JSON null.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const JsonPath& at);

}  // namespace fp8lm::tokenizer
