#include "chat/eval.h"

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

}  // namespace

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

std::uint64_t copy_bytes(const Value& v) {
  if (v.is_string()) return v.s.size();
  std::uint64_t n = 0;
  if (v.list) {
    n += v.list->size() * sizeof(Value);
    for (const Value& e : *v.list) n += e.s.size();
  }
  if (v.dict) {
    n += v.dict->size() * sizeof(Dict::value_type);
    for (const auto& [k, e] : *v.dict) n += k.size() + e.s.size();
  }
  return n;
}

void check_value_size(std::uint64_t bytes, std::string_view what) {
  if (t_rendering) t_rendering->reserve(bytes, what, 0, /*count=*/false);
}

void reserve_value(std::uint64_t bytes, std::string_view what, std::uint64_t items) {
  if (t_rendering) t_rendering->reserve(bytes, what, items);
}

void Evaluator::reserve(std::uint64_t bytes, std::string_view what, std::uint64_t items, bool count) {
  const std::uint64_t max = env_.limits.max_value_bytes;
  if (bytes > max)
    throw Error(std::string(what) + ": would build " + std::to_string(bytes) + " bytes, over the limit of " +
                std::to_string(max) + " bytes for one chat template value");
  if (count) step(items + bytes / kBytesPerStep);
}

Evaluator::Evaluator(const RenderEnv& env, const std::vector<std::pair<std::string, Value>>& variables) : env_(env) {
  for (const auto& [k, v] : variables) root_[k] = v;
  scopes_.push_back(&root_);
}

void Evaluator::step(std::uint64_t n) {
  steps_ += n;
  if (steps_ > env_.limits.max_steps)
    throw Error("render limit exceeded (" + std::to_string(env_.limits.max_steps) + " steps): runaway loop?");
}

void Evaluator::emit(const std::string& s) {
  if (out_->size() + s.size() > env_.limits.max_output_bytes)
    throw Error("rendered output exceeds " + std::to_string(env_.limits.max_output_bytes) + " bytes");
  *out_ += s;
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

Evaluator::Flow Evaluator::exec(const Node& n) {
  try {
    step();
    switch (n.kind) {
      case Node::Kind::Text: emit(n.text); return Flow::Normal;
      case Node::Kind::Output: emit(to_str(eval(*n.expr))); return Flow::Normal;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond))) return exec_body(body);
        return exec_body(n.else_body);
      case Node::Kind::For: return exec_for(n);
      case Node::Kind::Set: exec_set(n); return Flow::Normal;
      case Node::Kind::SetBlock: assign(n.text, Value::string(capture(n.body))); return Flow::Normal;
      case Node::Kind::Macro: assign(n.text, make_macro(n)); return Flow::Normal;
      case Node::Kind::CallBlock: {
        const Expr& c = *n.expr;
        Value callee = eval(*c.args[0]);
        CallArgs args;
        for (std::size_t k = 1; k < c.args.size(); ++k) args.positional.push_back(eval(*c.args[k]));
        for (const auto& [key, e] : c.kwargs) args.keyword.emplace_back(key, eval(*e));
        args.keyword.emplace_back("caller", make_macro(n));
        emit(to_str(call(callee, args, n.line)));
        return Flow::Normal;
      }
      case Node::Kind::FilterBlock: {
        // The filter chain was parsed onto a placeholder literal: evaluate it
        // with the body's text in the placeholder's place.
        std::vector<const Expr*> chain;
        for (const Expr* e = n.expr.get(); e->kind == Expr::Kind::Filter; e = e->args[0].get()) chain.push_back(e);
        Value v = Value::string(capture(n.body));
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args;
          for (std::size_t k = 1; k < (*it)->args.size(); ++k) args.positional.push_back(eval(*(*it)->args[k]));
          for (const auto& [key, e] : (*it)->kwargs) args.keyword.emplace_back(key, eval(*e));
          v = apply_filter(*this, (*it)->name, v, args);
        }
        emit(to_str(v));
        return Flow::Normal;
      }
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::Scope: return exec_body(n.body);
    }
  } catch (const TemplateRaised& e) {
    if (e.line() > 0) throw;
    throw TemplateRaised(e.message(), n.line);
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(kLinePrefix)) throw;
    throw Error(kLinePrefix + std::to_string(n.line) + ": " + e.what());
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_for(const Node& n) {
  const Value iterable = eval(*n.expr);
  if (iterable.is_none()) throw Error("'NoneType' object is not iterable");
  List all = iterate(iterable);
  Scope scope;
  scopes_.push_back(&scope);
  struct Pop { std::vector<Scope*>& s; ~Pop() { s.pop_back(); } } pop{scopes_};

  auto bind = [&](const Value& item) {
    if (n.targets.size() == 1) { scope[n.targets[0]] = item; return; }
    const List parts = iterate(item);
    if (parts.size() != n.targets.size())
      throw Error("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()) + " names");
    for (std::size_t k = 0; k < parts.size(); ++k) scope[n.targets[k]] = parts[k];
  };

  // `for x in y if cond` filters first: loop.index and loop.length count the
  // items that pass, as in Jinja2.
  List items;
  if (n.cond) {
    for (const Value& item : all) {
      step();
      bind(item);
      if (truthy(eval(*n.cond))) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }

  const auto len = static_cast<std::int64_t>(items.size());
  // One `loop` object per loop, updated in place each iteration (building a
  // fresh one per iteration dominated the cost of tight loops).
  Value loop = Value::make_namespace({{"index", {}}, {"index0", {}}, {"revindex", {}}, {"revindex0", {}},
                                      {"first", {}}, {"last", {}}, {"length", Value::integer(len)},
                                      {"depth", Value::integer(1)}, {"depth0", Value::integer(0)},
                                      {"previtem", {}}, {"nextitem", {}}, {"cycle", {}}});
  auto position = std::make_shared<std::int64_t>(0);
  (*loop.dict)[11].second = Value::function([position](CallArgs& a) {
    if (a.positional.empty()) throw Error("no items for cycling given");
    return a.positional[static_cast<std::size_t>(*position) % a.positional.size()];
  });
  for (std::int64_t k = 0; k < len; ++k) {
    step();
    scope.clear();  // each iteration starts afresh: a `set` in the body does not carry over
    const Value& item = items[static_cast<std::size_t>(k)];
    bind(item);
    auto& fields = *loop.dict;
    *position = k;
    fields[0].second = Value::integer(k + 1);
    fields[1].second = Value::integer(k);
    fields[2].second = Value::integer(len - k);
    fields[3].second = Value::integer(len - k - 1);
    fields[4].second = Value::boolean(k == 0);
    fields[5].second = Value::boolean(k == len - 1);
    fields[9].second = k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::undefined("there is no previous item");
    fields[10].second = k + 1 < len ? items[static_cast<std::size_t>(k + 1)] : Value::undefined("there is no next item");
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

void Evaluator::exec_set(const Node& n) {
  Value v = eval(*n.expr);
  if (!n.attr.empty()) {
    Value ns = lookup(n.text);
    if (ns.kind != Value::Kind::Namespace) throw Error("cannot assign attribute '" + n.attr + "' on non-namespace object '" + n.text + "'");
    if (n.attr.starts_with("_")) throw Error("cannot store underscore-prefixed attribute '" + n.attr + "' on a namespace");
    ns.set(n.attr, std::move(v));
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
  return Value::function([this, node](CallArgs& args) {
    if (++call_depth_ > env_.limits.max_call_depth) {
      --call_depth_;
      throw Error("macro recursion deeper than " + std::to_string(env_.limits.max_call_depth));
    }
    struct Depth { int& d; ~Depth() { --d; } } depth{call_depth_};
    // A macro sees the template's variables and its own arguments only.
    Scope local;
    std::size_t k = 0;
    for (const auto& [name, def] : node->params) {
      if (k < args.positional.size()) local[name] = args.positional[k];
      else local[name] = Value::undefined("parameter '" + name + "' was not provided");
      ++k;
    }
    List varargs;
    for (; k < args.positional.size(); ++k) varargs.push_back(args.positional[k]);
    Dict kwargs;
    for (auto& [key, v] : args.keyword) {
      bool is_param = false;
      for (const auto& p : node->params) is_param = is_param || p.first == key;
      if (is_param || key == "caller") local[key] = v;
      else kwargs.emplace_back(key, v);
    }
    std::vector<Scope*> saved = std::move(scopes_);
    scopes_ = {&root_, &local};
    struct Restore { std::vector<Scope*>& s; std::vector<Scope*>& saved; ~Restore() { s = std::move(saved); } } restore{scopes_, saved};
    for (const auto& [name, def] : node->params)
      if (local[name].is_undefined() && def) local[name] = eval(*def);
    local["varargs"] = Value::make_tuple(std::move(varargs));
    local["kwargs"] = Value::make_dict(std::move(kwargs));
    return Value::string(capture(node->body));
  });
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
  switch (e.kind) {
    case Expr::Kind::Literal: return e.value;
    case Expr::Kind::Name: return lookup(e.name);
    case Expr::Kind::Attr: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) undefined_error(obj);
      return get_attr(obj, e.name);
    }
    case Expr::Kind::Item: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) undefined_error(obj);
      return get_item(obj, eval(*e.args[1]));
    }
    case Expr::Kind::Slice: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) undefined_error(obj);
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
      const std::int64_t stepv = parts[2];
      if (stepv == 0) throw Error("slice step cannot be zero");
      std::vector<std::size_t> offsets;
      if (obj.is_string()) {
        check_value_size(saturating_mul(obj.s.size() + 1, sizeof(std::size_t)), "slicing a string (its code point index)");
        offsets = codepoint_offsets(obj.s);
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
      reserve(obj.is_string() ? obj.s.size() : idx.size() * sizeof(Value) + copy_bytes(obj), "slice", idx.size());
      if (obj.is_string()) {
        std::string out;
        for (const auto k : idx) {
          const auto u = static_cast<std::size_t>(k);
          out.append(obj.s, offsets[u], offsets[u + 1] - offsets[u]);
        }
        return Value::string(std::move(out));
      }
      List out;
      for (const auto k : idx) out.push_back(elems[static_cast<std::size_t>(k)]);
      return obj.kind == Value::Kind::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
    }
    case Expr::Kind::Call: {
      const Value callee = eval(*e.args[0]);
      CallArgs args;
      for (std::size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
      for (const auto& [key, v] : e.kwargs) args.keyword.emplace_back(key, eval(*v));
      return call(callee, args, e.line);
    }
    case Expr::Kind::Filter: {
      const Value subject = eval(*e.args[0]);
      CallArgs args;
      for (std::size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
      for (const auto& [key, v] : e.kwargs) args.keyword.emplace_back(key, eval(*v));
      return apply_filter(*this, e.name, subject, args);
    }
    case Expr::Kind::Test: {
      const Value subject = eval(*e.args[0]);
      CallArgs args;
      for (std::size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
      for (const auto& [key, v] : e.kwargs) args.keyword.emplace_back(key, eval(*v));
      return Value::boolean(apply_test(*this, e.name, subject, args) != e.negated);
    }
    case Expr::Kind::Neg:
    case Expr::Kind::Pos: {
      const Value v = eval(*e.args[0]);
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) throw Error(std::string("bad operand type for unary ") + (e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == Expr::Kind::Pos) return v.kind == Value::Kind::Bool ? Value::integer(v.b) : v;
      if (v.kind == Value::Kind::Float) return Value::number(-v.f);
      return Value::integer(checked(sub_ovf, 0, int_of(v)));
    }
    case Expr::Kind::Not: return Value::boolean(!truthy(eval(*e.args[0])));
    case Expr::Kind::And: {
      Value l = eval(*e.args[0]);
      return truthy(l) ? eval(*e.args[1]) : l;
    }
    case Expr::Kind::Or: {
      Value l = eval(*e.args[0]);
      return truthy(l) ? l : eval(*e.args[1]);
    }
    case Expr::Kind::Cond:
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    case Expr::Kind::ListLit:
    case Expr::Kind::TupleLit: {
      List out;
      std::uint64_t bytes = 0;  // each element's string is copied into the literal
      for (const auto& a : e.args) {
        out.push_back(eval(*a));
        bytes += sizeof(Value) + out.back().s.size();
        check_value_size(bytes, e.kind == Expr::Kind::ListLit ? "list literal" : "tuple literal");
      }
      return e.kind == Expr::Kind::ListLit ? Value::make_list(std::move(out)) : Value::make_tuple(std::move(out));
    }
    case Expr::Kind::DictLit: {
      Value d = Value::make_dict();
      std::uint64_t bytes = 0;
      for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
        const Value key = eval(*e.args[k]);
        if (!key.is_string()) throw Error("dict literal keys must be strings in chat templates");
        Value v = eval(*e.args[k + 1]);
        bytes += sizeof(Dict::value_type) + key.s.size() + v.s.size();
        check_value_size(bytes, "dict literal");
        d.set(key.s, std::move(v));
      }
      return d;
    }
    case Expr::Kind::Binary: return eval_binary(e);
  }
  return Value::undefined();
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  const Value a = eval(*e.args[0]);
  const Value b = eval(*e.args[1]);
  if (op == "~") {
    const std::string l = to_str(a), r = to_str(b);
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
      reserve(a.s.size() + b.s.size(), "string too long: '+' concatenation");
      return Value::string(a.s + b.s);
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
      out.reserve(a.s.size() * times);
      for (std::uint64_t k = 0; k < times; ++k) out += a.s;
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
