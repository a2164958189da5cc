#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/eval.h"
#include "common/error.h"

namespace fp8lm::chat {

Value Value::undefined(std::string why) { Value v; v.s = std::move(why); return v; }
Value Value::none() { Value v; v.kind = Kind::None; return v; }
Value Value::boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
Value Value::integer(std::int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
Value Value::number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
Value Value::string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
Value Value::make_list(List x) { Value v; v.kind = Kind::Array; v.list = std::make_shared<List>(std::move(x)); return v; }
Value Value::make_tuple(List x) { Value v = make_list(std::move(x)); v.kind = Kind::Tuple; return v; }
Value Value::make_dict(Dict x) { Value v; v.kind = Kind::Object; v.dict = std::make_shared<Dict>(std::move(x)); return v; }
Value Value::make_namespace(Dict x) { Value v = make_dict(std::move(x)); v.kind = Kind::Namespace; return v; }
Value Value::function(Function x) { Value v; v.kind = Kind::Callable; v.fn = std::make_shared<Function>(std::move(x)); return v; }

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return number(static_cast<double>(u));
      return integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List out;
      for (const auto& e : j) out.push_back(from_json(e));
      return make_list(std::move(out));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict out;
      for (const auto& [k, e] : j.items()) out.emplace_back(k, from_json(e));
      return make_dict(std::move(out));
    }
    default: throw Error("chat template input: unsupported JSON value");
  }
}

const Value* Value::find(const std::string& key) const {
  if (!dict) return nullptr;
  for (const auto& [k, v] : *dict)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict)
    if (k == key) { old = std::move(v); return; }
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
    case Value::Kind::String: return !v.s.empty();
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
}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) return as_double(a) == as_double(b);
    return as_int(a) == as_int(b);
  }
  // Python: a list never equals a tuple; Undefined equals only Undefined.
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.s == b.s;
    case Value::Kind::Array:
    case Value::Kind::Tuple:
      if (a.list->size() != b.list->size()) return false;
      for (std::size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::Object:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* o = b.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    default: return a.dict == b.dict && a.fn == b.fn;  // identity
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) return as_double(a) < as_double(b);
    return as_int(a) < as_int(b);
  }
  // UTF-8 byte order is code point order, which is how Python compares str.
  if (a.is_string() && b.is_string()) return a.s < b.s;
  if (a.is_sequence() && b.kind == a.kind) {
    const auto& x = *a.list;
    const auto& y = *b.list;
    for (std::size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equal(x[k], y[k])) return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw Error(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) + "'");
}

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
std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    } else out += c;
  }
  return out + q;
}
}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return repr_string(v.s);
    case Value::Kind::Array:
    case Value::Kind::Tuple: {
      const bool tuple = v.kind == Value::Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += repr((*v.list)[k]);
        // Shared nested lists make a repr exponentially larger than the value.
        check_value_size(out.size(), "str() of a list");
      }
      if (tuple && v.list->size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Value::Kind::Object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(e);
        check_value_size(out.size(), "str() of a dict");
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return python_float_repr(v.f);
    case Value::Kind::String: return v.s;
    case Value::Kind::Namespace: return "<Namespace " + repr(Value::make_dict(*v.dict)) + ">";
    case Value::Kind::Callable: return "<function>";
    default: return repr(v);
  }
}

namespace {
void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  const auto offsets = ensure_ascii ? codepoint_offsets(s) : std::vector<std::size_t>{};
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
    char b[16];
    if (u < 0x20 || (ensure_ascii && u == 0x7f)) {
      std::snprintf(b, sizeof b, "\\u%04x", u);
      out += b;
    } else if (ensure_ascii && u >= 0x80) {
      // Decode one UTF-8 sequence; astral code points become surrogate pairs, as Python writes them.
      std::size_t len = (u >= 0xf0) ? 4 : (u >= 0xe0) ? 3 : (u >= 0xc0) ? 2 : 1;
      len = std::min(len, s.size() - k);
      std::uint32_t cp = len == 1 ? u : (u & (0x7fu >> len));
      for (std::size_t m = 1; m < len; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3fu);
      k += len - 1;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800u + (cp >> 10), 0xdc00u + (cp & 0x3ffu));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", cp);
      }
      out += b;
    } else {
      out += c;
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  const std::string item_sep = o.has_separators ? o.item_sep : (o.indent >= 0 ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_sep : ": ";
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(o.indent * lvl), ' ');
  };
  switch (v.kind) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.b ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.i); return;
    case Value::Kind::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
      else out += python_float_repr(v.f);
      return;
    case Value::Kind::String: json_string(out, v.s, o.ensure_ascii); return;
    case Value::Kind::Array:
    case Value::Kind::Tuple: {
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      newline(level + 1);
      for (std::size_t k = 0; k < v.list->size(); ++k) {
        if (k) { out += item_sep; newline(level + 1); }
        json_value(out, (*v.list)[k], o, level + 1);
        // Shared nested lists make the JSON exponentially larger than the value.
        check_value_size(out.size(), "tojson");
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Object: {
      if (v.dict->empty()) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& e : *v.dict) items.push_back(&e);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      newline(level + 1);
      bool first = true;
      for (const auto* e : items) {
        if (!first) { out += item_sep; newline(level + 1); }
        first = false;
        json_string(out, e->first, o.ensure_ascii);
        out += key_sep;
        json_value(out, e->second, o, level + 1);
        check_value_size(out.size(), "tojson");
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      throw Error(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

std::vector<std::size_t> codepoint_offsets(const std::string& s) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xc0) != 0x80) out.push_back(k);
  out.push_back(s.size());
  return out;
}

std::size_t codepoint_count(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xc0) != 0x80) ++n;
  return n;
}

}  // namespace fp8lm::chat
