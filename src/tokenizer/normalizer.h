// Normalizers of tokenizer.json: text -> text before pre-tokenization. Only
// the text matters to fp8lm (no offsets), so each is a plain string rewrite.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"

namespace fp8lm::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual void normalize(std::string& text) const = 0;
  // At most how many times shorter (in bytes) normalize() can make a text;
  // infinity when it can delete text (Strip, Replace with shorter content).
  // Tokenizer::encode_at_most refuses long texts by this bound without work.
  virtual double max_shrink() const = 0;
};

// NFC/NFD/NFKC/NFKD, Lowercase, Replace, Prepend, Strip, Sequence; any other
// type is an error naming it. Returns nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const JsonPath& at);

}  // namespace fp8lm::tokenizer
