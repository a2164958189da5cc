// xgrammar's log, routed through fp8lm (its XGRAMMAR_LOG_CUSTOMIZE hook, library_warnings.cpp,
// compiled into fp8lm_xgrammar): its errors are thrown as it throws them, without its log prefix,
// and its warnings — a schema constraint it drops ("ignoring multipleOf", "Ignoring the length
// constraints …") — are collected on the thread that compiles, so that a constraint the library
// would not enforce is refused by name rather than silently ignored. Elsewhere (none collecting)
// a warning goes to stderr.
#pragma once

#include <string>
#include <vector>

namespace fp8lm::structured {

class LibraryWarnings {
 public:
  LibraryWarnings();   // collects this thread's warnings from now on
  ~LibraryWarnings();  // until it ends
  LibraryWarnings(const LibraryWarnings&) = delete;
  LibraryWarnings& operator=(const LibraryWarnings&) = delete;
  const std::vector<std::string>& messages() const { return messages_; }
  void add(std::string message) { messages_.push_back(std::move(message)); }

 private:
  LibraryWarnings* outer_;
  std::vector<std::string> messages_;
};

}  // namespace fp8lm::structured
