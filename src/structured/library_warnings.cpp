// Compiled into fp8lm_xgrammar (structured.cmake), beside the library code that calls these
// hooks: a static library's objects are pulled in only by what comes before them on the link line.
#include "structured/library_warnings.h"

#include <support/logging.h>  // xgrammar's (its cpp/ folder): LogFatalError and the hooks' declarations

#include <cstdio>

namespace fp8lm::structured {
namespace {
thread_local LibraryWarnings* collecting = nullptr;
}  // namespace

LibraryWarnings::LibraryWarnings() : outer_(collecting) { collecting = this; }
LibraryWarnings::~LibraryWarnings() { collecting = outer_; }

}  // namespace fp8lm::structured

namespace xgrammar {

// XGRAMMAR_LOG(FATAL) and XGRAMMAR_CHECK: thrown as xgrammar's own build throws them (its code
// catches LogFatalError by type); GrammarCompiler strips the file and line from the message.
[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  throw LogFatalError(file, lineno, message);
}

void LogMessageImpl(const std::string&, int, int level, const std::string& message) {
  if (level != XGRAMMAR_LOG_LEVEL_WARNING) return;  // info and debug: nothing a user acts on
  if (fp8lm::structured::collecting != nullptr) fp8lm::structured::collecting->add(message);
  else std::fprintf(stderr, "fp8lm: warning: xgrammar: %s\n", message.c_str());
}

}  // namespace xgrammar
