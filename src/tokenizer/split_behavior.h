// How a split keeps the matched delimiters (Hugging Face's SplitDelimiterBehavior).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"

namespace fp8lm::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_split_behavior(const std::string& name, const JsonPath& at);

// One span of a text: a match of the pattern or the text between matches.
struct Segment {
  std::size_t start, end;
  bool is_match;
};

// Appends the pieces of `text` to `out` as `behavior` groups the segments
// (which cover the text in order). Empty pieces are not appended.
void split_segments(std::string_view text, const std::vector<Segment>& segments, SplitBehavior behavior,
                    std::vector<std::string>& out);

}  // namespace fp8lm::tokenizer
