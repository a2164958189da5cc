// Progress of something long on stderr: on a terminal a one-line bar redrawn in
// place (with a detail such as a running perplexity, and the elapsed time);
// otherwise — a log file, a pipe, a test — plain lines, at most one every few
// seconds and always one at the end, so that logs stay short and readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fp8lm::cli {

class ProgressBar {
 public:
  // `what` ("loading weights"), `unit` ("layers") name the work.
  ProgressBar(std::string what, std::string unit);
  // `done` of `total` (done == total ends the line); `detail` is shown after the counts.
  void update(int64_t done, int64_t total, const std::string& detail = "");

 private:
  std::string what_, unit_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_line_;
  bool ended_ = false;
};

}  // namespace fp8lm::cli
