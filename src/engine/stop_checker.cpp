// Which match wins: the stop string that *ends* first in the text (the point
// at which a token-by-token stream would first see it), and of those ending
// there the longest. That makes the result independent of how the text was
// split into pieces; vLLM instead takes the first stop string in list order
// that occurs in the newest piece, which can depend on the split.
#include "engine/stop_checker.h"

#include <algorithm>

#include "common/error.h"

namespace fp8lm::engine {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length a UTF-8 sequence announces from its lead byte (0 if not a lead byte).
size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = sequence_length(static_cast<unsigned char>(s[i]));
    if (len == 0 || i + len > s.size()) return false;
    for (size_t j = 1; j < len; ++j)
      if (!is_continuation(static_cast<unsigned char>(s[i + j]))) return false;
    i += len;
  }
  return true;
}

// Where a trailing incomplete UTF-8 sequence starts (s.size() if none), so
// that a character split across pieces is never emitted in halves.
size_t complete_prefix(std::string_view s) {
  size_t i = s.size();
  size_t back = 0;
  while (i > 0 && back < 4 && is_continuation(static_cast<unsigned char>(s[i - 1]))) {
    --i;
    ++back;
  }
  if (i == 0) return s.size();  // no lead byte in reach: not ours to fix
  const size_t len = sequence_length(static_cast<unsigned char>(s[i - 1]));
  if (len > back + 1) return i - 1;  // the lead byte's sequence is not complete yet
  return s.size();
}

}  // namespace

StopChecker::StopChecker(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    if (s.empty()) throw Error("stop string must not be empty");
    if (!valid_utf8(s)) throw Error("stop string is not valid UTF-8: \"" + s + "\"");
  }
}

StopChecker::Step StopChecker::push(std::string_view piece) {
  Step step;
  if (stopped_) return step;
  held_.append(piece);

  // Earliest end, then earliest start. held_ contained no whole stop string
  // before this piece, so every match found here ends in the new text.
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (best == nullptr || end < best_end || (end == best_end && pos < best_start)) {
      best = &s;
      best_start = pos;
      best_end = end;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    step.stopped = true;
    step.matched = *best;
    step.text = held_.substr(0, best_start);
    held_.clear();
    return step;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold_from = held_.size();
  for (const std::string& s : stops_) {
    const size_t longest = std::min(s.size() - 1, held_.size());
    for (size_t len = longest; len > 0; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold_from = std::min(hold_from, held_.size() - len);
        break;
      }
    }
  }
  hold_from = std::min(hold_from, complete_prefix(held_));
  step.text = held_.substr(0, hold_from);
  held_.erase(0, hold_from);
  return step;
}

std::string StopChecker::finish() {
  std::string out;
  if (!stopped_) out = held_.substr(0, complete_prefix(held_));
  held_.clear();
  return out;
}

}  // namespace fp8lm::engine
