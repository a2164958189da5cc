#include "chat/eval.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "chat/builtins.h"
#include "common/error.h"

namespace fp8lm::chat {
namespace {

constexpr const char* kLinePrefix = "chat template line ";

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  throw Error(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool is_int_like(const Value& v) { return v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool; }
std::int64_t int_of(const Value& v) { return v.kind == Value::Kind::Bool ? v.b : v.i; }
double num_of(const Value& v) { return v.kind == Value::Kind::Float ? v.f : static_cast<double>(int_of(v)); }

// Integer arithmetic with Python's result or an error (Python has big ints;
// chat templates never need them).
template <typename Op>
std::int64_t checked(Op op, std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (op(a, b, &r)) throw Error("integer overflow");
  return r;
}
bool add_ovf(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_ovf(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_ovf(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_mul_overflow(a, b, r); }

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// The render running on this thread, for the size checks of code that has no
// Evaluator at hand (see check_value_size).
thread_local Evaluator* t_rendering = nullptr;

[[noreturn, gnu::noinline]] void nests_too_deep() {
  throw Error("template nests deeper than " + std::to_string(kMaxRenderDepth) +
              " levels (blocks, expressions and macro calls together)");
}

// One level of the render's nesting (a statement or an expression node) for
// as long as it is evaluated; throws beyond kMaxRenderDepth.
class Nesting {
 public:
  explicit Nesting(int& depth) : depth_(depth) {
    if (depth_ >= kMaxRenderDepth) nests_too_deep();
    ++depth_;
  }
  ~Nesting() { --depth_; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;

 private:
  int& depth_;
};

}  // namespace

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

std::uint64_t copy_bytes(const Value& v) {
  if (v.is_string()) return v.str().size();
  std::uint64_t n = 0;
  if (v.list) {
    n += v.list->size() * sizeof(Value);
    for (const Value& e : *v.list) n += e.str().size();
  }
  if (v.dict) {
    n += v.dict->size() * sizeof(Dict::value_type);
    for (const auto& [k, e] : *v.dict) n += k.size() + e.str().size();
  }
  return n;
}

void check_value_size(std::uint64_t bytes, std::string_view what) {
  if (t_rendering) t_rendering->reserve(bytes, what, 0, /*count=*/false);
}

void reserve_value(std::uint64_t bytes, std::string_view what, std::uint64_t items) {
  if (t_rendering) t_rendering->reserve(bytes, what, items);
}

void count_work(std::uint64_t bytes, std::uint64_t items) {
  if (!t_rendering) return;
  if (items) t_rendering->step(items);
  if (bytes) t_rendering->count_bytes(bytes);
}

void Evaluator::reserve(std::uint64_t bytes, std::string_view what, std::uint64_t items, bool count) {
  const std::uint64_t max = env_.limits.max_value_bytes;
  if (bytes > max)
    throw Error(std::string(what) + ": would build " + std::to_string(bytes) + " bytes, over the limit of " +
                std::to_string(max) + " bytes for one chat template value");
  if (!count) return;
  step(items);
  count_bytes(bytes);
}

Evaluator::Evaluator(const RenderEnv& env, const std::vector<std::pair<std::string, Value>>& variables) : env_(env) {
  for (const auto& [k, v] : variables) root_[k] = v;
  scopes_.push_back(&root_);
}

Evaluator::~Evaluator() {
  for (auto& [dict, weak] : assigned_)
    if (const auto d = weak.lock()) d->clear();
}

void Evaluator::step(std::uint64_t n) {
  steps_ += n;
  if (steps_ + bytes_ / kBytesPerStep > env_.limits.max_steps) over_steps();
}

void Evaluator::over_steps() const {
  throw Error("render limit exceeded (" + std::to_string(env_.limits.max_steps) + " steps): runaway loop?");
}

void Evaluator::count_bytes(std::uint64_t bytes) {
  bytes_ += bytes;
  step(0);
}

void Evaluator::emit(const std::string& s) {
  if (out_->size() + s.size() > env_.limits.max_output_bytes)
    throw Error("rendered output exceeds " + std::to_string(env_.limits.max_output_bytes) + " bytes");
  count_bytes(s.size());
  *out_ += s;
}

void Evaluator::emit_value(const Value& v) {
  if (v.is_string()) emit(v.str());  // no copy of a string to print it
  else emit(to_str(v));
}

void Evaluator::note_assigned(const std::shared_ptr<Dict>& ns) {
  auto [it, added] = assigned_.try_emplace(ns.get(), ns);
  if (!added && it->second.expired()) it->second = ns;  // a new namespace where a freed one was
  if (assigned_.size() < 2 * assigned_live_) return;
  // Forget the freed ones now and then, so that a loop making namespaces
  // keeps this map as small as the namespaces alive.
  std::erase_if(assigned_, [](const auto& e) { return e.second.expired(); });
  assigned_live_ = std::max<std::size_t>(assigned_.size(), 64);
}

std::string Evaluator::render(const Body& body) {
  Evaluator* saved = t_rendering;
  t_rendering = this;
  struct Restore { Evaluator* s; ~Restore() { t_rendering = s; } } restore{saved};
  std::string result;
  out_ = &result;
  exec_body(body);
  return result;
}

std::string Evaluator::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Evaluator::Flow Evaluator::exec_body(const Body& body) {
  for (const auto& n : body) {
    const Flow f = exec(*n);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

// exec() and eval() recurse once per level of the template (blocks,
// expressions, macro calls), so they hold nothing but the dispatch: each form
// is evaluated in a function of its own, out of line, whose locals are on
// the stack only while that form runs (under AddressSanitizer eval() with
// every form inline took 7 KB a level). Cold error paths are out of line too.

Evaluator::Flow Evaluator::exec(const Node& n) {
  try {
    const Nesting nesting(depth_);
    step();
    return exec_node(n);
  } catch (const Error&) {
    rethrow_at_line(n.line);
  }
}

void Evaluator::rethrow_at_line(int line) {
  try {
    throw;
  } catch (const TemplateRaised& e) {
    if (e.line() > 0) throw;
    throw TemplateRaised(e.message(), line);
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(kLinePrefix)) throw;
    throw Error(kLinePrefix + std::to_string(line) + ": " + e.what());
  }
}

Evaluator::Flow Evaluator::exec_node(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Text: emit(n.text); return Flow::Normal;
    case Node::Kind::Output: exec_output(n); return Flow::Normal;
    case Node::Kind::If: return exec_if(n);
    case Node::Kind::For: return exec_for(n);
    case Node::Kind::Set: exec_set(n); return Flow::Normal;
    case Node::Kind::SetBlock: exec_set_block(n); return Flow::Normal;
    case Node::Kind::Macro: exec_macro(n); return Flow::Normal;
    case Node::Kind::CallBlock: exec_call_block(n); return Flow::Normal;
    case Node::Kind::FilterBlock: exec_filter_block(n); return Flow::Normal;
    case Node::Kind::Break: return Flow::Break;
    case Node::Kind::Continue: return Flow::Continue;
    case Node::Kind::Scope: return exec_body(n.body);
  }
  return Flow::Normal;
}

void Evaluator::exec_output(const Node& n) { emit_value(eval(*n.expr)); }

Evaluator::Flow Evaluator::exec_if(const Node& n) {
  for (const auto& [cond, body] : n.branches)
    if (test(*cond)) return exec_body(body);
  return exec_body(n.else_body);
}

bool Evaluator::test(const Expr& e) { return truthy(eval(e)); }

void Evaluator::exec_set_block(const Node& n) { assign(n.text, Value::string(capture(n.body))); }

void Evaluator::exec_macro(const Node& n) { assign(n.text, make_macro(n)); }

void Evaluator::exec_call_block(const Node& n) {
  const Expr& c = *n.expr;
  const Value callee = eval(*c.args[0]);
  CallArgs args = eval_args(c);
  args.keyword.emplace_back("caller", make_macro(n));
  emit_value(call(callee, args, n.line));
}

void Evaluator::exec_filter_block(const Node& n) {
  // The filter chain was parsed onto a placeholder literal: evaluate it
  // with the body's text in the placeholder's place.
  std::vector<const Expr*> chain;
  for (const Expr* e = n.expr.get(); e->kind == Expr::Kind::Filter; e = e->args[0].get()) chain.push_back(e);
  Value v = Value::string(capture(n.body));
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    CallArgs args = eval_args(**it);
    v = apply_filter(*this, (*it)->name, v, args);
  }
  emit_value(v);
}

// The `loop` object of a loop over `len` items, whose cycle() reads `position`.
Value Evaluator::make_loop(std::int64_t len, const std::shared_ptr<std::int64_t>& position) {
  Value loop = Value::make_namespace({{"index", {}}, {"index0", {}}, {"revindex", {}}, {"revindex0", {}},
                                      {"first", {}}, {"last", {}}, {"length", Value::integer(len)},
                                      {"depth", Value::integer(1)}, {"depth0", Value::integer(0)},
                                      {"previtem", {}}, {"nextitem", {}}, {"cycle", {}}});
  (*loop.dict)[11].second = Value::function([position](CallArgs& a) {
    if (a.positional.empty()) throw Error("no items for cycling given");
    return a.positional[static_cast<std::size_t>(*position) % a.positional.size()];
  });
  return loop;
}

void Evaluator::bind(Scope& scope, const std::vector<std::string>& targets, const Value& item) {
  if (targets.size() == 1) { scope[targets[0]] = item; return; }
  const List parts = iterate(item);
  if (parts.size() != targets.size())
    throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(targets.size()) + " names");
  for (std::size_t k = 0; k < parts.size(); ++k) scope[targets[k]] = parts[k];
}

Evaluator::Flow Evaluator::exec_for(const Node& n) {
  List items = loop_items(n);
  Scope scope;
  scopes_.push_back(&scope);
  struct Pop { std::vector<Scope*>& s; ~Pop() { s.pop_back(); } } pop{scopes_};
  if (n.cond) filter_loop_items(n, scope, items);

  const auto len = static_cast<std::int64_t>(items.size());
  // One `loop` object per loop, updated in place each iteration (building a
  // fresh one per iteration dominated the cost of tight loops).
  auto position = std::make_shared<std::int64_t>(0);
  const Value loop = make_loop(len, position);
  for (std::int64_t k = 0; k < len; ++k) {
    step();
    scope.clear();  // each iteration starts afresh: a `set` in the body does not carry over
    bind(scope, n.targets, items[static_cast<std::size_t>(k)]);
    *position = k;
    set_loop_fields(*loop.dict, items, k);
    scope["loop"] = loop;
    const Flow f = exec_body(n.body);
    if (f == Flow::Break) break;
  }
  if (len == 0) {
    scope.erase("loop");
    return exec_body(n.else_body);
  }
  return Flow::Normal;
}

List Evaluator::loop_items(const Node& n) {
  const Value iterable = eval(*n.expr);
  if (iterable.is_none()) throw Error("'NoneType' object is not iterable");
  return iterate(iterable);
}

// `for x in y if cond` filters first: loop.index and loop.length count the
// items that pass, as in Jinja2.
void Evaluator::filter_loop_items(const Node& n, Scope& scope, List& items) {
  List kept;
  for (const Value& item : items) {
    step();
    bind(scope, n.targets, item);
    if (test(*n.cond)) kept.push_back(item);
  }
  items = std::move(kept);
}

void Evaluator::set_loop_fields(Dict& fields, const List& items, std::int64_t k) {
  const auto len = static_cast<std::int64_t>(items.size());
  fields[0].second = Value::integer(k + 1);
  fields[1].second = Value::integer(k);
  fields[2].second = Value::integer(len - k);
  fields[3].second = Value::integer(len - k - 1);
  fields[4].second = Value::boolean(k == 0);
  fields[5].second = Value::boolean(k == len - 1);
  fields[9].second = k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::undefined("there is no previous item");
  fields[10].second = k + 1 < len ? items[static_cast<std::size_t>(k + 1)] : Value::undefined("there is no next item");
}

void Evaluator::exec_set(const Node& n) {
  Value v = eval(*n.expr);
  if (!n.attr.empty()) {
    Value ns = lookup(n.text);
    if (ns.kind != Value::Kind::Namespace) throw Error("cannot assign attribute '" + n.attr + "' on non-namespace object '" + n.text + "'");
    if (n.attr.starts_with("_")) throw Error("cannot store underscore-prefixed attribute '" + n.attr + "' on a namespace");
    ns.set(n.attr, std::move(v));
    note_assigned(ns.dict);
    return;
  }
  if (!n.targets.empty()) {
    const List parts = iterate(v);
    if (parts.size() != n.targets.size())
      throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()) + " names");
    for (std::size_t k = 0; k < parts.size(); ++k) assign(n.targets[k], parts[k]);
    return;
  }
  assign(n.text, std::move(v));
}

Value Evaluator::make_macro(const Node& n) {
  const Node* node = &n;
  return Value::function([this, node](CallArgs& args) { return call_macro(*node, args); });
}

Value Evaluator::call_macro(const Node& node, CallArgs& args) {
  if (++call_depth_ > env_.limits.max_call_depth) {
    --call_depth_;
    throw Error("macro recursion deeper than " + std::to_string(env_.limits.max_call_depth));
  }
  struct Depth { int& d; ~Depth() { --d; } } depth{call_depth_};
  // A macro sees the template's variables and its own arguments only.
  Scope local;
  std::size_t k = 0;
  for (const auto& [name, def] : node.params) {
    if (k < args.positional.size()) local[name] = args.positional[k];
    else local[name] = Value::undefined("parameter '" + name + "' was not provided");
    ++k;
  }
  List varargs;
  for (; k < args.positional.size(); ++k) varargs.push_back(args.positional[k]);
  Dict kwargs;
  for (auto& [key, v] : args.keyword) {
    bool is_param = false;
    for (const auto& p : node.params) is_param = is_param || p.first == key;
    if (is_param || key == "caller") local[key] = v;
    else kwargs.emplace_back(key, v);
  }
  std::vector<Scope*> saved = std::move(scopes_);
  scopes_ = {&root_, &local};
  struct Restore { std::vector<Scope*>& s; std::vector<Scope*>& saved; ~Restore() { s = std::move(saved); } } restore{scopes_, saved};
  for (const auto& [name, def] : node.params)
    if (local[name].is_undefined() && def) local[name] = eval(*def);
  local["varargs"] = Value::make_tuple(std::move(varargs));
  local["kwargs"] = Value::make_dict(std::move(kwargs));
  return Value::string(capture(node.body));
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    const auto f = (*it)->find(name);
    if (f != (*it)->end()) return f->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

void Evaluator::assign(const std::string& name, Value v) { (*scopes_.back())[name] = std::move(v); }

Value Evaluator::call(const Value& callee, CallArgs& args, int line) {
  if (callee.is_undefined()) undefined_error(callee);
  if (callee.kind != Value::Kind::Callable) throw Error(std::string("'") + type_name(callee) + "' object is not callable");
  (void)line;
  return (*callee.fn)(args);
}

Value Evaluator::eval(const Expr& e) {
  const Nesting nesting(depth_);
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: return lookup(e.name);
    case Expr::Kind::Attr: return eval_attr(e);
    case Expr::Kind::Item: return eval_item(e);
    case Expr::Kind::Slice: return eval_slice(e);
    case Expr::Kind::Call: return eval_call(e);
    case Expr::Kind::Filter: return eval_filter(e);
    case Expr::Kind::Test: return eval_test(e);
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: return eval_unary(e);
    case Expr::Kind::Not: return Value::boolean(!test(*e.args[0]));
    case Expr::Kind::And:
    case Expr::Kind::Or: return eval_and_or(e);
    case Expr::Kind::Cond: return eval_cond(e);
    case Expr::Kind::ListLit:
    case Expr::Kind::TupleLit: return eval_sequence(e);
    case Expr::Kind::DictLit: return eval_dict(e);
    case Expr::Kind::Binary: return eval_binary(e);
  }
  return Value::undefined();
}

// The operand of an attribute, item or slice access (Undefined refused).
Value Evaluator::eval_object(const Expr& e) {
  Value obj = eval(e);
  if (obj.is_undefined()) undefined_error(obj);
  return obj;
}

Value Evaluator::eval_attr(const Expr& e) { return get_attr(eval_object(*e.args[0]), e.name); }

Value Evaluator::eval_item(const Expr& e) {
  const Value obj = eval_object(*e.args[0]);
  return get_item(obj, eval(*e.args[1]));
}

Value Evaluator::eval_slice(const Expr& e) {
  const Value obj = eval_object(*e.args[0]);
  std::int64_t parts[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.args[static_cast<std::size_t>(k) + 1]) continue;
    const Value v = eval(*e.args[static_cast<std::size_t>(k) + 1]);
    if (v.is_none()) continue;
    if (!is_int_like(v)) throw Error("slice indices must be integers or None");
    parts[k] = int_of(v);
    given[k] = true;
  }
  return slice(obj, parts, given);
}

// obj[start:stop:step] as Python slices, the parts given or not.
Value Evaluator::slice(const Value& obj, const std::int64_t (&parts)[3], const bool (&given)[3]) {
  const std::int64_t stepv = parts[2];
  if (stepv == 0) throw Error("slice step cannot be zero");
  std::vector<std::size_t> offsets;
  if (obj.is_string()) {
    reserve(saturating_mul(obj.str().size() + 1, sizeof(std::size_t)), "slicing a string (its code point index)");
    offsets = codepoint_offsets(obj.str());
  } else if (!obj.is_sequence()) {
    throw Error(std::string("'") + type_name(obj) + "' object is not subscriptable");
  }
  static const List kNoElements;  // a string's slice reads `offsets`
  const List& elems = obj.is_sequence() ? *obj.list : kNoElements;
  const std::int64_t n = obj.is_string() ? static_cast<std::int64_t>(offsets.size() - 1) : static_cast<std::int64_t>(elems.size());
  // Python's slice.indices().
  auto norm = [&](std::int64_t v, bool has, std::int64_t def_pos, std::int64_t def_neg) {
    if (!has) return stepv > 0 ? def_pos : def_neg;
    if (v < 0) v += n;
    if (stepv > 0) return std::clamp<std::int64_t>(v, 0, n);
    return std::clamp<std::int64_t>(v, -1, n - 1);
  };
  const std::int64_t start = norm(parts[0], given[0], 0, n - 1);
  const std::int64_t stop = norm(parts[1], given[1], n, -1);
  std::vector<std::int64_t> idx;
  for (std::int64_t k = start; stepv > 0 ? k < stop : k > stop; k += stepv) idx.push_back(k);
  // The result is at most the whole of obj (each element copied once).
  reserve(obj.is_string() ? obj.str().size() : idx.size() * sizeof(Value) + copy_bytes(obj), "slice", idx.size());
  if (obj.is_string()) {
    std::string out;
    for (const auto k : idx) {
      const auto u = static_cast<std::size_t>(k);
      out.append(obj.str(), offsets[u], offsets[u + 1] - offsets[u]);
    }
    return Value::string(std::move(out));
  }
  List out;
  for (const auto k : idx) out.push_back(elems[static_cast<std::size_t>(k)]);
  return obj.kind == Value::Kind::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

// The arguments of a call, filter or test: args[1..] and the keywords.
CallArgs Evaluator::eval_args(const Expr& e) {
  CallArgs args;
  for (std::size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
  for (const auto& [key, v] : e.kwargs) args.keyword.emplace_back(key, eval(*v));
  return args;
}

Value Evaluator::eval_call(const Expr& e) {
  const Value callee = eval(*e.args[0]);
  CallArgs args = eval_args(e);
  return call(callee, args, e.line);
}

Value Evaluator::eval_filter(const Expr& e) {
  const Value subject = eval(*e.args[0]);
  CallArgs args = eval_args(e);
  return apply_filter(*this, e.name, subject, args);
}

Value Evaluator::eval_test(const Expr& e) {
  const Value subject = eval(*e.args[0]);
  CallArgs args = eval_args(e);
  return Value::boolean(apply_test(*this, e.name, subject, args) != e.negated);
}

Value Evaluator::eval_unary(const Expr& e) {
  const Value v = eval(*e.args[0]);
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_number()) throw Error(std::string("bad operand type for unary ") + (e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
  if (e.kind == Expr::Kind::Pos) return v.kind == Value::Kind::Bool ? Value::integer(v.b) : v;
  if (v.kind == Value::Kind::Float) return Value::number(-v.f);
  return Value::integer(checked(sub_ovf, 0, int_of(v)));
}

Value Evaluator::eval_and_or(const Expr& e) {
  Value l = eval(*e.args[0]);
  if (truthy(l) == (e.kind == Expr::Kind::And)) return eval(*e.args[1]);
  return l;
}

Value Evaluator::eval_cond(const Expr& e) {
  if (test(*e.args[0])) return eval(*e.args[1]);
  return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
}

Value Evaluator::eval_sequence(const Expr& e) {
  List out;
  std::uint64_t bytes = 0;  // the elements' strings counted as copied (copy_bytes)
  for (const auto& a : e.args) {
    out.push_back(eval(*a));
    bytes += sizeof(Value) + out.back().str().size();
    check_value_size(bytes, e.kind == Expr::Kind::ListLit ? "list literal" : "tuple literal");
  }
  return e.kind == Expr::Kind::ListLit ? Value::make_list(std::move(out)) : Value::make_tuple(std::move(out));
}

Value Evaluator::eval_dict(const Expr& e) {
  Value d = Value::make_dict();
  std::uint64_t bytes = 0;
  for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
    const Value key = eval(*e.args[k]);
    if (!key.is_string()) throw Error("dict literal keys must be strings in chat templates");
    Value v = eval(*e.args[k + 1]);
    bytes += sizeof(Dict::value_type) + key.str().size() + v.str().size();
    check_value_size(bytes, "dict literal");
    count_bytes(key.str().size());  // a dict holds its own copy of each key
    d.set(key.str(), std::move(v));
  }
  return d;
}

Value Evaluator::eval_binary(const Expr& e) {
  const Value a = eval(*e.args[0]);
  const Value b = eval(*e.args[1]);
  return binary(e.name, a, b);
}

Value Evaluator::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string l_text, r_text;  // str() of what is not a string already
    const std::string& l = a.is_string() ? a.str() : (l_text = to_str(a));
    const std::string& r = b.is_string() ? b.str() : (r_text = to_str(b));
    reserve(l.size() + r.size(), "'~' concatenation");
    return Value::string(l + r);
  }
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "in" || op == "not in") {
    CallArgs args;
    args.positional.push_back(b);
    return Value::boolean(apply_test(*this, "in", a, args) == (op == "in"));
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return Value::boolean(less(a, b));
  if (op == ">") return Value::boolean(less(b, a));
  if (op == "<=") return Value::boolean(!less(b, a));
  if (op == ">=") return Value::boolean(!less(a, b));

  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      reserve(a.str().size() + b.str().size(), "string too long: '+' concatenation");
      return Value::string(a.str() + b.str());
    }
    if (a.is_sequence() && b.kind == a.kind) {
      reserve(copy_bytes(a) + copy_bytes(b), "'+' concatenation", a.list->size() + b.list->size());
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.kind == Value::Kind::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
    }
  }
  if (op == "*" && ((a.is_string() || a.is_sequence()) && is_int_like(b))) {
    auto times = static_cast<std::uint64_t>(std::max<std::int64_t>(0, int_of(b)));
    reserve(saturating_mul(copy_bytes(a), times),
            "repetition too large ('" + std::string(type_name(a)) + "' * " + std::to_string(times) + ")",
            a.is_string() ? 0 : saturating_mul(a.list->size(), times));
    if (copy_bytes(a) == 0) times = 0;  // nothing to repeat: no loop of `times` empty rounds
    if (a.is_string()) {
      std::string out;
      out.reserve(a.str().size() * times);
      for (std::uint64_t k = 0; k < times; ++k) out += a.str();
      return Value::string(std::move(out));
    }
    List out;
    out.reserve(a.list->size() * times);
    for (std::uint64_t k = 0; k < times; ++k) out.insert(out.end(), a.list->begin(), a.list->end());
    return a.kind == Value::Kind::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
  }
  if (!a.is_number() || !b.is_number()) type_error(op, a, b);

  const bool ints = is_int_like(a) && is_int_like(b);
  const double x = num_of(a), y = num_of(b);
  if (op == "+") return ints ? Value::integer(checked(add_ovf, int_of(a), int_of(b))) : Value::number(x + y);
  if (op == "-") return ints ? Value::integer(checked(sub_ovf, int_of(a), int_of(b))) : Value::number(x - y);
  if (op == "*") return ints ? Value::integer(checked(mul_ovf, int_of(a), int_of(b))) : Value::number(x * y);
  if (op == "/") {
    if (y == 0) throw Error("division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) throw Error(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (ints) {
      const std::int64_t p = int_of(a), q = int_of(b);
      if (p == std::numeric_limits<std::int64_t>::min() && q == -1) throw Error("integer overflow");
      std::int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) { --d; m += q; }  // Python floors
      return Value::integer(op == "//" ? d : m);
    }
    return Value::number(op == "//" ? std::floor(x / y) : py_mod(x, y));
  }
  if (op == "**") {
    if (ints && int_of(b) >= 0) {
      const std::int64_t base = int_of(a), exp = int_of(b);
      if (base == 0 || base == 1) return Value::integer(exp == 0 ? 1 : base);
      if (base == -1) return Value::integer(exp % 2 == 0 ? 1 : -1);
      std::int64_t acc = 1;  // |base| >= 2 overflows within 63 steps
      for (std::int64_t k = 0; k < exp; ++k)
        if (__builtin_mul_overflow(acc, base, &acc)) throw Error("integer overflow");
      return Value::integer(acc);
    }
    return Value::number(std::pow(x, y));
  }
  type_error(op, a, b);
}

}  // namespace fp8lm::chat
