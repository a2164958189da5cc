// The process's peak resident memory, for tests that hold code to a memory
// bound (hostile inputs must be refused before the memory is spent): Linux's
// VmHWM, which clear_refs "5" resets to the current resident size.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace fp8lm::test {

// Peak resident memory in KiB since the last reset (-1 where /proc has none).
inline std::int64_t peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6));
  return -1;
}

// Resets the peak to what is resident now, so that what an earlier test used
// does not hide a new peak; returns that.
inline std::int64_t reset_peak_rss_kib() {
  std::ofstream("/proc/self/clear_refs") << "5";
  return peak_rss_kib();
}

}  // namespace fp8lm::test
