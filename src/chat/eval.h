// Runs a parsed template: Jinja2's scoping (loop bodies and macros get their
// own scope; `if` does not), loop controls, macros, and hard limits so that
// no template can hang or exhaust memory.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
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
  // plus the strings its elements carry (counted as if copied: its printed
  // form carries them).
  std::size_t max_value_bytes = 64u << 20;
  // Statements + loop iterations + elements built or compared + one per
  // kBytesPerStep bytes of string work (read, written or compared).
  std::uint64_t max_steps = 20'000'000;
  int max_call_depth = 64;  // nested macro calls
};

// How deeply a render may nest statement blocks, expressions and macro calls
// together: each level is a few stack frames of the evaluator. The parser
// bounds one expression (kMaxExpressionDepth, 200) and block nesting (200),
// so no template reaches this without macros, which multiply them. At this
// bound, with a value walk of kMaxValueDepth on top, the deepest renders we
// could build ran in 512 KiB of stack (2 MiB under AddressSanitizer).
inline constexpr int kMaxRenderDepth = 1000;

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
// Counts reading, comparing or writing `bytes` of strings, and `items`
// elements or keys looked at, as work: every operation whose cost grows with
// its operands charges what it touches, so no template outruns max_steps
// however long its strings.
void count_work(std::uint64_t bytes, std::uint64_t items = 0);
// Bytes that copying `v` allocates: a list copies its slots, and its
// elements' strings are counted too (nested lists and dicts are shared).
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
  // Empties the namespaces the render assigned to (see assigned_).
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  std::string render(const Body& body);

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args, int line);
  void step(std::uint64_t n = 1);  // counts work against the limit
  void count_bytes(std::uint64_t bytes);  // kBytesPerStep bytes = 1 step
  // reserve_value (count: also count the work) for this render.
  void reserve(std::uint64_t bytes, std::string_view what, std::uint64_t items = 0, bool count = true);
  const RenderEnv& env() const { return env_; }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::unordered_map<std::string, Value>;

  // exec() and eval() recurse once per level and only dispatch; every form
  // runs in a function of its own, never inlined into them, so that a level
  // of nesting costs the stack only what that level's form needs (the frames
  // bound kMaxRenderDepth's cost).
  Flow exec_body(const Body& body);
  Flow exec(const Node& n);
  [[noreturn, gnu::noinline]] static void rethrow_at_line(int line);
  [[gnu::noinline]] Flow exec_node(const Node& n);
  [[gnu::noinline]] void exec_output(const Node& n);
  [[gnu::noinline]] Flow exec_if(const Node& n);
  [[gnu::noinline]] Flow exec_for(const Node& n);
  [[gnu::noinline]] List loop_items(const Node& n);
  [[gnu::noinline]] void filter_loop_items(const Node& n, Scope& scope, List& items);
  [[gnu::noinline]] static Value make_loop(std::int64_t len, const std::shared_ptr<std::int64_t>& position);
  [[gnu::noinline]] static void set_loop_fields(Dict& fields, const List& items, std::int64_t k);
  [[gnu::noinline]] static void bind(Scope& scope, const std::vector<std::string>& targets, const Value& item);
  [[gnu::noinline]] void exec_set(const Node& n);
  [[gnu::noinline]] void exec_set_block(const Node& n);
  [[gnu::noinline]] void exec_macro(const Node& n);
  [[gnu::noinline]] void exec_call_block(const Node& n);
  [[gnu::noinline]] void exec_filter_block(const Node& n);
  Value make_macro(const Node& n);
  [[gnu::noinline]] Value call_macro(const Node& node, CallArgs& args);
  std::string capture(const Body& body);
  void emit(const std::string& s);
  void emit_value(const Value& v);
  void note_assigned(const std::shared_ptr<Dict>& ns);
  [[noreturn, gnu::noinline]] void over_steps() const;

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  [[gnu::noinline]] bool test(const Expr& e);  // truthy(eval(e))
  [[gnu::noinline]] Value eval_object(const Expr& e);
  [[gnu::noinline]] Value eval_attr(const Expr& e);
  [[gnu::noinline]] Value eval_item(const Expr& e);
  [[gnu::noinline]] Value eval_slice(const Expr& e);
  [[gnu::noinline]] Value slice(const Value& obj, const std::int64_t (&parts)[3], const bool (&given)[3]);
  [[gnu::noinline]] CallArgs eval_args(const Expr& e);
  [[gnu::noinline]] Value eval_call(const Expr& e);
  [[gnu::noinline]] Value eval_filter(const Expr& e);
  [[gnu::noinline]] Value eval_test(const Expr& e);
  [[gnu::noinline]] Value eval_unary(const Expr& e);
  [[gnu::noinline]] Value eval_and_or(const Expr& e);
  [[gnu::noinline]] Value eval_cond(const Expr& e);
  [[gnu::noinline]] Value eval_sequence(const Expr& e);
  [[gnu::noinline]] Value eval_dict(const Expr& e);
  [[gnu::noinline]] Value eval_binary(const Expr& e);
  [[gnu::noinline]] Value binary(const std::string& op, const Value& a, const Value& b);

  const RenderEnv& env_;
  Scope globals_;
  std::vector<Scope*> scopes_;  // innermost last; scopes_[0] is the template's
  Scope root_;
  std::string* out_ = nullptr;
  std::uint64_t steps_ = 0;
  std::uint64_t bytes_ = 0;  // string work, counted as bytes_ / kBytesPerStep steps
  int call_depth_ = 0;
  int depth_ = 0;  // blocks + expressions + macro calls being evaluated (kMaxRenderDepth)
  // Every namespace `set ns.x = ...` wrote to. Only such a write can close a
  // cycle of shared containers (`set ns.self = ns`), which reference counting
  // never frees: the render empties them all when it ends. Weak, so that a
  // namespace dropped by the template is freed as usual.
  std::unordered_map<const Dict*, std::weak_ptr<Dict>> assigned_;
  std::size_t assigned_live_ = 64;  // entries after the last pruning (note_assigned)
};

}  // namespace fp8lm::chat
