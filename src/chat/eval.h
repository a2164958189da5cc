// Runs a parsed template: Jinja2's scoping (loop bodies and macros get their
// own scope; `if` does not), loop controls, macros, and hard limits so that
// no template can hang or exhaust memory.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"
#include "common/error.h"

namespace fp8lm::chat {

// raise_exception(message) called by a template (e.g. "Conversation roles
// must alternate"); message() is the template's own text.
class TemplateRaised : public Error {
 public:
  TemplateRaised(std::string message, int line)
      : Error(line > 0 ? "chat template line " + std::to_string(line) + ": " + message : message),
        message_(std::move(message)), line_(line) {}
  const std::string& message() const { return message_; }
  int line() const { return line_; }

 private:
  std::string message_;
  int line_;
};

struct RenderLimits {
  std::size_t max_output_bytes = 64u << 20;
  // One value a template builds: a string's bytes, or a list's element slots
  // plus the strings its elements carry (copying a list copies them).
  std::size_t max_value_bytes = 64u << 20;
  std::uint64_t max_steps = 20'000'000;  // statements + loop iterations + list elements built
  int max_call_depth = 64;               // nested macro calls
};

// Size checks made BEFORE the allocation they guard, so that a hostile
// template fails at the limit instead of after spending the memory. They act
// on the render running on this thread (iterate(), str methods and repr()
// have no Evaluator at hand) and do nothing outside a render.
//
// Throws when a value of `bytes` would exceed max_value_bytes; `what` names
// the operation in the message.
void check_value_size(std::uint64_t bytes, std::string_view what);
// check_value_size, and counts building the value as work: `items` steps
// plus one per kBytesPerStep bytes (copying memory is work too).
void reserve_value(std::uint64_t bytes, std::string_view what, std::uint64_t items = 0);
inline constexpr std::uint64_t kBytesPerStep = 16;
// Bytes that copying `v` allocates: a list copies its slots and its elements'
// strings (nested lists and dicts are shared, not copied).
std::uint64_t copy_bytes(const Value& v);
// a * b, saturating instead of wrapping.
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b);

// What a render sees beyond its variables: the clock (for strftime_now, so
// tests can fix it) and the limits.
struct RenderEnv {
  std::function<std::tm()> now;  // empty: the local time
  RenderLimits limits;
};

class Evaluator {
 public:
  Evaluator(const RenderEnv& env, const std::vector<std::pair<std::string, Value>>& variables);

  std::string render(const Body& body);

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args, int line);
  void step(std::uint64_t n = 1);  // counts work against the limit
  // reserve_value (count: also count the work) for this render.
  void reserve(std::uint64_t bytes, std::string_view what, std::uint64_t items = 0, bool count = true);
  const RenderEnv& env() const { return env_; }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec_body(const Body& body);
  Flow exec(const Node& n);
  Flow exec_for(const Node& n);
  void exec_set(const Node& n);
  Value make_macro(const Node& n);
  std::string capture(const Body& body);
  void emit(const std::string& s);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  Value eval_binary(const Expr& e);

  const RenderEnv& env_;
  Scope globals_;
  std::vector<Scope*> scopes_;  // innermost last; scopes_[0] is the template's
  Scope root_;
  std::string* out_ = nullptr;
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace fp8lm::chat
