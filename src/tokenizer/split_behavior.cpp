#include "tokenizer/split_behavior.h"

#include <algorithm>

namespace fp8lm::tokenizer {

SplitBehavior parse_split_behavior(const std::string& name, const JsonPath& at) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  at.fail("unknown split behavior '" + name + "'");
}

void split_segments(std::string_view text, const std::vector<Segment>& segments, SplitBehavior behavior,
                    std::vector<std::string>& out) {
  // Group segments into [start, end) spans first, then emit the non-empty ones.
  struct Span {
    std::size_t start, end;
  };
  std::vector<Span> spans;
  spans.reserve(segments.size());
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& s : segments)
        if (!s.is_match) spans.push_back({s.start, s.end});
      break;
    case SplitBehavior::kIsolated:
      for (const auto& s : segments) spans.push_back({s.start, s.end});
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.is_match && previous_match && !spans.empty())
          spans.back().end = s.end;
        else
          spans.push_back({s.start, s.end});
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : segments) {
        if (s.is_match && !previous_match && !spans.empty())
          spans.back().end = s.end;
        else
          spans.push_back({s.start, s.end});
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walk from the end: a match joins the piece that follows it.
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !spans.empty())
          spans.back().start = it->start;
        else
          spans.push_back({it->start, it->end});
        previous_match = it->is_match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    }
  }
  for (const auto& s : spans)
    if (s.end > s.start) out.emplace_back(text.substr(s.start, s.end - s.start));
}

}  // namespace fp8lm::tokenizer
