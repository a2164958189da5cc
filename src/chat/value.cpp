#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/eval.h"
#include "common/error.h"

namespace fp8lm::chat {

Value Value::undefined(std::string why) {
  Value v;
  if (!why.empty()) v.text = std::make_shared<const std::string>(std::move(why));
  return v;
}
Value Value::none() { Value v; v.kind = Kind::None; return v; }
Value Value::boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
Value Value::integer(std::int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
Value Value::number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  if (!x.empty()) v.text = std::make_shared<const std::string>(std::move(x));
  return v;
}
Value Value::make_list(List x) { Value v; v.kind = Kind::Array; v.list = std::make_shared<List>(std::move(x)); return v; }
Value Value::make_tuple(List x) { Value v = make_list(std::move(x)); v.kind = Kind::Tuple; return v; }
Value Value::make_dict(Dict x) { Value v; v.kind = Kind::Object; v.dict = std::make_shared<Dict>(std::move(x)); return v; }
Value Value::make_namespace(Dict x) { Value v = make_dict(std::move(x)); v.kind = Kind::Namespace; return v; }
Value Value::function(Function x) { Value v; v.kind = Kind::Callable; v.fn = std::make_shared<Function>(std::move(x)); return v; }

namespace {

// Containers whose last holder is being destroyed, waiting for the loop in
// ~Value; null while no such loop runs on this thread. A raw pointer to the
// loop's own stack object, so that nothing thread-local needs destroying.
struct Doomed {
  std::vector<std::shared_ptr<List>> lists;
  std::vector<std::shared_ptr<Dict>> dicts;
};
thread_local Doomed* t_doomed = nullptr;

// Hands `p` to the destruction loop when this is its last holder; false when
// the container lives on elsewhere or the hand-over could not allocate (the
// caller then lets it go as usual).
template <typename T>
bool hand_over(std::shared_ptr<T>& p, std::vector<std::shared_ptr<T>>& to) noexcept {
  if (!p || p.use_count() != 1) return false;
  try {
    to.push_back(std::move(p));
    return true;
  } catch (...) {
    return false;
  }
}

Value from_json_at(const nlohmann::ordered_json& j, int depth);

// Arrays and objects out of line: from_json_at recurses once per level.
[[gnu::noinline]] Value from_json_array(const nlohmann::ordered_json& j, int depth) {
  List out;
  for (const auto& e : j) out.push_back(from_json_at(e, depth + 1));
  return Value::make_list(std::move(out));
}

[[gnu::noinline]] Value from_json_object(const nlohmann::ordered_json& j, int depth) {
  Dict out;
  for (const auto& [k, e] : j.items()) out.emplace_back(k, from_json_at(e, depth + 1));
  return Value::make_dict(std::move(out));
}

[[noreturn, gnu::noinline]] void json_too_deep() {
  throw Error("chat template input: JSON nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

// `depth`: the arrays and objects around j.
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<std::int64_t>());
    case T::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(j.get<std::string>());
    case T::array:
      if (depth >= kMaxValueDepth) json_too_deep();
      return from_json_array(j, depth);
    case T::object:
      if (depth >= kMaxValueDepth) json_too_deep();
      return from_json_object(j, depth);
    default: throw Error("chat template input: unsupported JSON value");
  }
}

}  // namespace

Value::~Value() {
  // Destroying the last holder of a list destroys its elements, whose lists
  // destroy theirs: one stack frame per level, and a template can nest values
  // without bound (`set x = [x]` in a loop). So the containers that die with
  // this value go to a loop instead; destroying one there hands its own
  // elements' containers to the same loop, and the stack stays flat.
  if (!(list && list.use_count() == 1) && !(dict && dict.use_count() == 1)) return;
  if (t_doomed) {
    hand_over(list, t_doomed->lists);
    hand_over(dict, t_doomed->dicts);
    return;
  }
  Doomed doomed;
  t_doomed = &doomed;
  hand_over(list, doomed.lists);
  hand_over(dict, doomed.dicts);
  while (!doomed.lists.empty() || !doomed.dicts.empty()) {
    // Popped first, then destroyed: what it hands over lands in the vector.
    if (!doomed.lists.empty()) {
      std::shared_ptr<List> l = std::move(doomed.lists.back());
      doomed.lists.pop_back();
      l.reset();
    } else {
      std::shared_ptr<Dict> d = std::move(doomed.dicts.back());
      doomed.dicts.pop_back();
      d.reset();
    }
  }
  t_doomed = nullptr;
}

const std::string& Value::str() const {
  static const std::string kEmpty;
  return text ? *text : kEmpty;
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {
// The slot of `key` in `d`, or nullptr. Counts each key looked at and the
// bytes compared (only keys of the same length are compared byte by byte).
template <typename D>
auto find_key(D& d, const std::string& key) -> decltype(&d.front()) {
  std::uint64_t looked = 0, bytes = 0;
  decltype(&d.front()) hit = nullptr;
  for (auto& e : d) {
    ++looked;
    if (e.first.size() != key.size()) continue;
    bytes += key.size();
    if (e.first == key) { hit = &e; break; }
  }
  count_work(bytes, looked);
  return hit;
}
}  // namespace

const Value* Value::find(const std::string& key) const {
  if (!dict) return nullptr;
  const auto* e = find_key(std::as_const(*dict), key);
  return e ? &e->second : nullptr;
}

void Value::set(const std::string& key, Value v) {
  if (auto* e = find_key(*dict, key)) { e->second = std::move(v); return; }
  dict->emplace_back(key, std::move(v));
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::Array: return "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Object: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::Array:
    case Value::Kind::Tuple: return !v.list->empty();
    case Value::Kind::Object: return !v.dict->empty();
    case Value::Kind::Namespace:
    case Value::Kind::Callable: return true;
  }
  return false;
}

namespace {
double as_double(const Value& v) {
  if (v.kind == Value::Kind::Float) return v.f;
  if (v.kind == Value::Kind::Bool) return v.b ? 1.0 : 0.0;
  return static_cast<double>(v.i);
}
std::int64_t as_int(const Value& v) { return v.kind == Value::Kind::Bool ? (v.b ? 1 : 0) : v.i; }

[[noreturn, gnu::noinline]] void nests_too_deep(const char* what) {
  throw Error(std::string(what) + ": value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

// Entering a container `depth` containers deep; `what` names the walk. (The
// walks recurse once per level: the error is built out of line.)
void check_depth(int depth, const char* what) {
  if (depth >= kMaxValueDepth) nests_too_deep(what);
}

bool equal_at(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) return as_double(a) == as_double(b);
    return as_int(a) == as_int(b);
  }
  // Python: a list never equals a tuple; Undefined equals only Undefined.
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: {
      if (a.text == b.text) return true;  // one shared string
      const std::string &x = a.str(), &y = b.str();
      if (x.size() != y.size()) return false;
      count_work(x.size());
      return x == y;
    }
    case Value::Kind::Array:
    case Value::Kind::Tuple:
      // One shared list: Python finds identical elements equal without
      // comparing them (PyObject_RichCompareBool).
      if (a.list == b.list) return true;
      if (a.list->size() != b.list->size()) return false;
      check_depth(depth, "comparison");
      count_work(0, a.list->size());
      for (std::size_t k = 0; k < a.list->size(); ++k)
        if (!equal_at((*a.list)[k], (*b.list)[k], depth + 1)) return false;
      return true;
    case Value::Kind::Object:
      if (a.dict == b.dict) return true;
      if (a.dict->size() != b.dict->size()) return false;
      check_depth(depth, "comparison");
      for (const auto& [k, v] : *a.dict) {
        const Value* o = b.find(k);
        if (!o || !equal_at(v, *o, depth + 1)) return false;
      }
      return true;
    default: return a.dict == b.dict && a.fn == b.fn;  // identity
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) return as_double(a) < as_double(b);
    return as_int(a) < as_int(b);
  }
  // UTF-8 byte order is code point order, which is how Python compares str.
  if (a.is_string() && b.is_string()) {
    const std::string &x = a.str(), &y = b.str();
    count_work(std::min(x.size(), y.size()));  // at most this many compared
    return x < y;
  }
  if (a.is_sequence() && b.kind == a.kind) {
    check_depth(depth, "comparison");
    const auto& x = *a.list;
    const auto& y = *b.list;
    for (std::size_t k = 0; k < x.size() && k < y.size(); ++k) {
      count_work(0, 1);
      if (!equal_at(x[k], y[k], depth + 1)) return less_at(x[k], y[k], depth + 1);
    }
    return x.size() < y.size();
  }
  throw Error(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

}  // namespace

bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then laid out as Python's repr: positional
  // for exponents in [-4, 16), scientific (at least two exponent digits) otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') { sign = "-"; sci.erase(0, 1); }
  const auto epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(epos + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else {
      const auto int_len = static_cast<std::size_t>(exp) + 1;
      if (digits.size() <= int_len) out = digits + std::string(int_len - digits.size(), '0') + ".0";
      else out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + mant + e;
}

namespace {

// A backslash, `kind` ('x' or 'u') and `digits` lowercase hex digits of `v`,
// as Python writes escapes (snprintf per byte made escaping 20 times slower
// than the other string work a step pays for).
void append_escape(std::string& out, char kind, std::uint32_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '\\';
  out += kind;
  for (int d = digits - 1; d >= 0; --d) out += kHex[(v >> (4 * d)) & 0xfu];
}

void repr_string(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  out += q;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) append_escape(out, 'x', u, 2);
    else out += c;
  }
  out += q;
}

void str_into(std::string& out, const Value& v, int depth);

void dict_repr(std::string& out, const Dict& d, int depth) {
  check_depth(depth, "str()");
  out += '{';
  bool first = true;
  for (const auto& [k, e] : d) {
    if (!first) out += ", ";
    first = false;
    repr_string(out, k);
    out += ": ";
    if (e.is_string()) repr_string(out, e.str());
    else str_into(out, e, depth + 1);
    check_value_size(out.size(), "str() of a dict");
  }
  out += '}';
}

// Appends str(v) (for a container, its elements' repr) to `out`: one buffer
// for the whole walk, so each byte is written once however deep it sits.
void str_into(std::string& out, const Value& v, int depth) {
  switch (v.kind) {
    case Value::Kind::Undefined: return;
    case Value::Kind::None: out += "None"; return;
    case Value::Kind::Bool: out += v.b ? "True" : "False"; return;
    case Value::Kind::Int: out += std::to_string(v.i); return;
    case Value::Kind::Float: out += python_float_repr(v.f); return;
    case Value::Kind::String: out += v.str(); return;
    case Value::Kind::Callable: out += "<function>"; return;
    case Value::Kind::Namespace:
      out += "<Namespace ";
      dict_repr(out, *v.dict, depth);
      out += '>';
      return;
    case Value::Kind::Object: dict_repr(out, *v.dict, depth); return;
    case Value::Kind::Array:
    case Value::Kind::Tuple: {
      check_depth(depth, "str()");
      const bool tuple = v.kind == Value::Kind::Tuple;
      out += tuple ? '(' : '[';
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        const Value& e = (*v.list)[k];
        if (e.is_string()) repr_string(out, e.str());
        else str_into(out, e, depth + 1);
        // Shared nested lists make a repr exponentially larger than the value.
        check_value_size(out.size(), "str() of a list");
      }
      if (tuple && v.list->size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return;
    }
  }
}

}  // namespace

std::string repr(const Value& v) {
  std::string out;
  if (v.is_string()) repr_string(out, v.str());
  else str_into(out, v, 0);
  count_work(out.size());
  return out;
}

std::string to_str(const Value& v) {
  std::string out;
  str_into(out, v, 0);
  count_work(out.size());
  return out;
}

namespace {
void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (std::size_t k = 0; k < s.size(); ++k) {
    const char c = s[k];
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (u < 0x20 || (ensure_ascii && u == 0x7f)) {
      append_escape(out, 'u', u, 4);
    } else if (ensure_ascii && u >= 0x80) {
      // Decode one UTF-8 sequence; astral code points become surrogate pairs, as Python writes them.
      std::size_t len = (u >= 0xf0) ? 4 : (u >= 0xe0) ? 3 : (u >= 0xc0) ? 2 : 1;
      len = std::min(len, s.size() - k);
      std::uint32_t cp = len == 1 ? u : (u & (0x7fu >> len));
      for (std::size_t m = 1; m < len; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3fu);
      k += len - 1;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_escape(out, 'u', 0xd800u + (cp >> 10), 4);
        append_escape(out, 'u', 0xdc00u + (cp & 0x3ffu), 4);
      } else {
        append_escape(out, 'u', cp, 4);
      }
    } else {
      out += c;
    }
  }
  out += '"';
}

// json.dumps' writer for one call: the options and the separators they
// imply, fixed once. json_value recurses once per level of the value, so the
// containers are written by functions of their own, out of line: a level
// costs the stack only what a list or a dict needs.
struct JsonWriter {
  std::string& out;
  const JsonOptions& o;
  std::string item_sep, key_sep;

  JsonWriter(std::string& buffer, const JsonOptions& options)
      : out(buffer), o(options),
        item_sep(o.has_separators ? o.item_sep : (o.indent >= 0 ? "," : ", ")),
        key_sep(o.has_separators ? o.key_sep : ": ") {}

  void newline(int level) {
    if (o.indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(o.indent * level), ' ');
  }

  void value(const Value& v, int level) {
    switch (v.kind) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.b ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.i); return;
      case Value::Kind::Float:
        if (std::isnan(v.f)) out += "NaN";
        else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
        else out += python_float_repr(v.f);
        return;
      case Value::Kind::String: json_string(out, v.str(), o.ensure_ascii); return;
      case Value::Kind::Array:
      case Value::Kind::Tuple: list(*v.list, level); return;
      case Value::Kind::Object: dict(*v.dict, level); return;
      default: not_serializable(v);
    }
  }

  [[gnu::noinline]] void list(const List& l, int level) {
    if (l.empty()) { out += "[]"; return; }
    check_depth(level, "tojson");
    out += '[';
    newline(level + 1);
    for (std::size_t k = 0; k < l.size(); ++k) {
      if (k) { out += item_sep; newline(level + 1); }
      value(l[k], level + 1);
      // Shared nested lists make the JSON exponentially larger than the value.
      check_value_size(out.size(), "tojson");
    }
    newline(level);
    out += ']';
  }

  [[gnu::noinline]] void dict(const Dict& d, int level) {
    if (d.empty()) { out += "{}"; return; }
    check_depth(level, "tojson");
    const std::vector<const Dict::value_type*> items = ordered(d);
    out += '{';
    newline(level + 1);
    bool first = true;
    for (const auto* e : items) {
      if (!first) { out += item_sep; newline(level + 1); }
      first = false;
      json_string(out, e->first, o.ensure_ascii);
      out += key_sep;
      value(e->second, level + 1);
      check_value_size(out.size(), "tojson");
    }
    newline(level);
    out += '}';
  }

  // The dict's entries in insertion order, or by key with sort_keys.
  [[gnu::noinline]] std::vector<const Dict::value_type*> ordered(const Dict& d) const {
    std::vector<const Dict::value_type*> items;
    for (const auto& e : d) items.push_back(&e);
    if (o.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
        count_work(std::min(a->first.size(), b->first.size()), 1);
        return a->first < b->first;
      });
    return items;
  }

  [[noreturn, gnu::noinline]] static void not_serializable(const Value& v) {
    throw Error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonWriter(out, options).value(v, 0);
  count_work(out.size());
  return out;
}

std::vector<std::size_t> codepoint_offsets(const std::string& s) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xc0) != 0x80) out.push_back(k);
  out.push_back(s.size());
  return out;
}

std::size_t codepoint_count(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  return n;
}

}  // namespace fp8lm::chat
