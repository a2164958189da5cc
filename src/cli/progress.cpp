#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace fp8lm::cli {

namespace {
constexpr double kPlainLineSeconds = 5.0;  // without a terminal: a line at most this often
constexpr double kRedrawSeconds = 0.1;     // on a terminal: a redraw at most this often
constexpr int kWidth = 30;
}  // namespace

ProgressBar::ProgressBar(std::string what, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()), last_line_(start_) {}

void ProgressBar::update(int64_t done, int64_t total, const std::string& detail) {
  if (ended_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool end = done >= total;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double since = std::chrono::duration<double>(now - last_line_).count();
  if (!end && since < (tty_ ? kRedrawSeconds : kPlainLineSeconds) && !(tty_ && done == 1)) return;
  last_line_ = now;
  const std::string counts = std::to_string(done) + "/" + std::to_string(total) + " " + unit_ +
                             (detail.empty() ? "" : ", " + detail);
  char time[32];
  std::snprintf(time, sizeof time, "%.1f s", elapsed);
  if (tty_) {
    const int filled = total <= 0 ? kWidth : int(double(done) / double(total) * kWidth);
    // \033[K clears what a longer earlier line left.
    std::fprintf(stderr, "\rfp8lm: %s [%s%s] %s, %s\033[K%s", what_.c_str(), std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(kWidth - filled), ' ').c_str(), counts.c_str(), time, end ? "\n" : "");
  } else {
    std::fprintf(stderr, "fp8lm: %s: %s, %s\n", what_.c_str(), counts.c_str(), time);
  }
  std::fflush(stderr);
  ended_ = end;
}

}  // namespace fp8lm::cli
