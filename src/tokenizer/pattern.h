// The "pattern" of Split, Replace (normalizer and decoder): {"String": s} for a
// literal or {"Regex": r} for a regular expression.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace fp8lm::tokenizer {

class Pattern {
 public:
  Pattern(std::string literal, std::shared_ptr<const Regex> regex)
      : literal_(std::move(literal)), regex_(std::move(regex)) {}

  // Calls on_match(start, end) for every non-overlapping match, left to right.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const {
    if (regex_) {
      regex_->for_each_match(text, on_match);
      return;
    }
    if (literal_.empty()) return;
    for (std::size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size()))
      on_match(pos, pos + literal_.size());
  }

  std::string replace_all(std::string_view text, std::string_view content) const;

  bool is_literal() const { return regex_ == nullptr; }
  const std::string& literal() const { return literal_; }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

Pattern make_pattern(const nlohmann::json& spec, const JsonPath& at);

}  // namespace fp8lm::tokenizer
