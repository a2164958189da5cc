#include "chat/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string.h>  // memmem
#include <vector>

#include "chat/eval.h"
#include "common/error.h"

namespace fp8lm::chat {
namespace {

// Argument `index` (positional) or `name` (keyword), or nullptr when absent.
const Value* arg(const CallArgs& a, std::size_t index, const char* name) {
  if (index < a.positional.size()) return &a.positional[index];
  for (const auto& [k, v] : a.keyword)
    if (k == name) return &v;
  return nullptr;
}

const std::string& str_arg(const CallArgs& a, std::size_t index, const char* name, const char* what) {
  const Value* v = arg(a, index, name);
  if (!v || !v->is_string()) throw Error(std::string(what) + ": argument '" + name + "' must be a string");
  return v->str();
}

std::int64_t int_arg(const CallArgs& a, std::size_t index, const char* name, std::int64_t def) {
  const Value* v = arg(a, index, name);
  if (!v || v->is_none()) return def;
  if (v->kind == Value::Kind::Bool) return v->b;
  if (v->kind != Value::Kind::Int) throw Error(std::string("argument '") + name + "' must be an integer");
  return v->i;
}

bool bool_arg(const CallArgs& a, std::size_t index, const char* name, bool def) {
  const Value* v = arg(a, index, name);
  return v ? truthy(*v) : def;
}

std::uint32_t decode_at(const std::string& s, std::size_t& k) {
  const auto u = static_cast<unsigned char>(s[k]);
  std::size_t len = (u >= 0xf0) ? 4 : (u >= 0xe0) ? 3 : (u >= 0xc0) ? 2 : 1;
  len = std::min(len, s.size() - k);
  std::uint32_t cp = len == 1 ? u : (u & (0x7fu >> len));
  for (std::size_t m = 1; m < len; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3fu);
  k += len;
  return cp;
}

// The bytes of the code point that starts at s[k]: its lead byte and the
// continuation bytes after it (as codepoint_offsets splits a string).
std::size_t codepoint_length(std::string_view s, std::size_t k) {
  std::size_t n = k + 1;
  while (n < s.size() && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) ++n;
  return n - k;
}

// Calls f(start, length) for each code point of `s` as codepoint_offsets
// splits it (stray continuation bytes before the first lead byte belong to
// none), walking in place: an index of offsets costs 8 bytes per byte.
template <typename F>
void for_each_codepoint(std::string_view s, F f) {
  std::size_t k = 0;
  while (k < s.size() && (static_cast<unsigned char>(s[k]) & 0xc0) == 0x80) ++k;
  while (k < s.size()) {
    const std::size_t n = codepoint_length(s, k);
    f(k, n);
    k += n;
  }
}

// The first `needle` in `hay` at or after `from`, or npos; counts its work.
// glibc's memmem runs in time linear in the bytes it scans (Two-Way), where
// std::string::find tries the needle at each position: |hay| × |needle| on
// hostile inputs (a 15 MB needle in 30 MB ran for minutes). It is given one
// window at a time (at least 64 KiB, overlapping by the needle's length):
// AddressSanitizer checks the whole range memmem is given on every call,
// which made loops over many matches (replace, count, split) quadratic there.
std::size_t find_sub(const std::string& hay, const std::string& needle, std::size_t from = 0) {
  if (from > hay.size() || hay.size() - from < needle.size()) return std::string::npos;
  const std::size_t m = needle.size(), window = std::max<std::size_t>(std::size_t{1} << 16, m);
  std::size_t pos = from, found = std::string::npos, calls = 0;
  while (true) {
    const std::size_t len = std::min(hay.size() - pos, window + m - 1);
    ++calls;
    if (const void* hit = memmem(hay.data() + pos, len, needle.data(), m)) {
      found = static_cast<std::size_t>(static_cast<const char*>(hit) - hay.data());
      break;
    }
    if (pos + len == hay.size()) break;
    pos += window;
  }
  // Two-Way reads each byte it passes at most twice and prepares the needle
  // on every call.
  const std::size_t scanned = (found == std::string::npos ? hay.size() : found + m) - from;
  count_work(2 * scanned + calls * m);
  return found;
}

// The last `needle` in `hay`, or npos: the first match of the reversed
// needle in the reversed string, for find_sub's linear time.
std::size_t rfind_sub(const std::string& hay, const std::string& needle) {
  if (needle.size() > hay.size()) return std::string::npos;
  count_work(hay.size() + needle.size());  // the reversed copies
  const std::string rhay(hay.rbegin(), hay.rend()), rneedle(needle.rbegin(), needle.rend());
  const std::size_t at = find_sub(rhay, rneedle);
  return at == std::string::npos ? at : hay.size() - at - needle.size();
}

// Python's str.isspace() code points.
bool py_space(std::uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string ascii_map(std::string s, int (*f)(int)) {
  count_work(s.size());
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}
int to_upper(int c) { return (c >= 'a' && c <= 'z') ? c - 32 : c; }
int to_lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string title_case(const std::string& s) {
  count_work(s.size());
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (is_alpha(c)) {
      c = static_cast<char>(prev_cased ? to_lower(c) : to_upper(c));
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_map(s, to_lower);
  if (!out.empty()) out[0] = static_cast<char>(to_upper(static_cast<unsigned char>(out[0])));
  return out;
}

// Python's str.replace, which Jinja's replace filter calls: `count` < 0
// replaces every match; an empty `from` puts `to` before each code point and
// at the end. One step per replacement, and the bytes scanned and written.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (from.empty()) {
    auto insert = [&](std::size_t rest) {
      if (count >= 0 && done >= count) return;
      check_value_size(out.size() + to.size() + rest, "replace");
      out += to;
      ++done;
      count_work(0, 1);
    };
    for_each_codepoint(s, [&](std::size_t k, std::size_t n) {
      insert(s.size() - k);
      out.append(s, k, n);
    });
    insert(0);
    count_work(out.size());
    return out;
  }
  std::size_t pos = 0;
  while (count < 0 || done < count) {
    const auto f = find_sub(s, from, pos);
    if (f == std::string::npos) break;
    check_value_size(out.size() + (f - pos) + to.size(), "replace");
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++done;
    count_work(0, 1);
  }
  check_value_size(out.size() + (s.size() - pos), "replace");
  out.append(s, pos);
  count_work(out.size());
  return out;
}

List split_parts(const std::string& s, const Value* sep, std::int64_t maxsplit, bool from_right) {
  List parts;
  if (!sep || sep->is_none()) {
    // Runs of whitespace, ends ignored.
    std::vector<std::pair<std::size_t, std::size_t>> words;
    std::size_t k = 0, start = std::string::npos;
    while (k < s.size()) {
      std::size_t n = k;
      const bool sp = py_space(decode_at(s, n));
      if (sp && start != std::string::npos) {
        check_value_size((words.size() + 1) * sizeof(Value) + s.size(), "split");
        words.emplace_back(start, k);
        start = std::string::npos;
      }
      if (!sp && start == std::string::npos) start = k;
      k = n;
    }
    if (start != std::string::npos) words.emplace_back(start, s.size());
    if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        const auto m = static_cast<std::size_t>(maxsplit);
        for (std::size_t w = 0; w < m; ++w) parts.push_back(Value::string(s.substr(words[w].first, words[w].second - words[w].first)));
        std::string rest = s.substr(words[m].first);
        rest = py_strip(rest, Value::none(), false, true);
        parts.push_back(Value::string(rest));
      } else {
        const std::size_t first_kept = words.size() - static_cast<std::size_t>(maxsplit);
        parts.push_back(Value::string(py_strip(s.substr(0, words[first_kept - 1].second), Value::none(), true, false)));
        for (std::size_t w = first_kept; w < words.size(); ++w) parts.push_back(Value::string(s.substr(words[w].first, words[w].second - words[w].first)));
      }
      return parts;
    }
    for (const auto& [a, b] : words) parts.push_back(Value::string(s.substr(a, b - a)));
    return parts;
  }
  if (!sep->is_string()) throw Error("split: separator must be a string or None");
  const std::string& d = sep->str();
  if (d.empty()) throw Error("empty separator");
  std::vector<std::size_t> hits;
  for (std::size_t p = find_sub(s, d); p != std::string::npos; p = find_sub(s, d, p + d.size())) {
    check_value_size((hits.size() + 2) * sizeof(Value) + s.size(), "split");
    hits.push_back(p);
  }
  if (maxsplit >= 0 && static_cast<std::int64_t>(hits.size()) > maxsplit) {
    const auto m = static_cast<std::size_t>(maxsplit);
    if (from_right) {
      // rsplit scans from the right; with non-overlapping matches the same hits apply.
      hits.erase(hits.begin(), hits.end() - static_cast<std::ptrdiff_t>(m));
    } else {
      hits.resize(m);
    }
  }
  std::size_t pos = 0;
  for (const auto h : hits) {
    parts.push_back(Value::string(s.substr(pos, h - pos)));
    pos = h + d.size();
  }
  parts.push_back(Value::string(s.substr(pos)));
  return parts;
}

// Python's str.split / rsplit. Counts the bytes it reads and the parts.
List split(const std::string& s, const Value* sep, std::int64_t maxsplit, bool from_right) {
  List parts = split_parts(s, sep, maxsplit, from_right);
  count_work(s.size() + parts.size() * sizeof(Value), parts.size());  // as any list built
  return parts;
}

// A bound method of a str. It holds `self` (whose bytes are shared, not
// copied) and charges each call by the bytes it reads and writes.
Value string_method(const Value& self, const std::string& name) {
  auto method = [&self](auto f) {
    return Value::function([self, f](CallArgs& a) { return f(self.str(), a); });
  };
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return method([start](const std::string& s, CallArgs& a) {
      const Value* p = arg(a, 0, "prefix");
      if (!p) throw Error("startswith/endswith needs an argument");
      const List options = p->kind == Value::Kind::Tuple ? *p->list : List{*p};
      count_work(0, options.size());
      for (const Value& o : options) {
        if (!o.is_string()) throw Error("startswith/endswith: argument must be str or a tuple of str");
        count_work(std::min(s.size(), o.str().size()));
        if (start ? s.starts_with(o.str()) : s.ends_with(o.str())) return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return method([right](const std::string& s, CallArgs& a) {
      return Value::make_list(split(s, arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1), right));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return method([l, r](const std::string& s, CallArgs& a) {
      const Value* c = arg(a, 0, "chars");
      return Value::string(py_strip(s, c ? *c : Value::none(), l, r));
    });
  }
  if (name == "upper") return method([](const std::string& s, CallArgs&) { return Value::string(ascii_map(s, to_upper)); });
  if (name == "lower") return method([](const std::string& s, CallArgs&) { return Value::string(ascii_map(s, to_lower)); });
  if (name == "title") return method([](const std::string& s, CallArgs&) { return Value::string(title_case(s)); });
  if (name == "capitalize") return method([](const std::string& s, CallArgs&) { return Value::string(capitalize(s)); });
  if (name == "replace") {
    return method([](const std::string& s, CallArgs& a) {
      const Value* from = arg(a, 0, "old");
      const Value* to = arg(a, 1, "new");
      if (!from || !to || !from->is_string() || !to->is_string()) throw Error("replace: needs two strings");
      const std::int64_t count = int_arg(a, 2, "count", -1);
      if (from->str().empty()) throw Error("str.replace with an empty pattern is not supported");
      return Value::string(replace_all(s, from->str(), to->str(), count));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return method([name](const std::string& s, CallArgs& a) {
      const std::string& sub = str_arg(a, 0, "sub", name.c_str());
      if (name == "count") {
        if (sub.empty()) {
          count_work(s.size());
          return Value::integer(static_cast<std::int64_t>(codepoint_count(s) + 1));
        }
        std::int64_t n = 0;
        for (std::size_t p = find_sub(s, sub); p != std::string::npos; p = find_sub(s, sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      const auto p = name == "rfind" ? rfind_sub(s, sub) : find_sub(s, sub);
      if (p == std::string::npos) {
        if (name == "index") throw Error("substring not found");
        return Value::integer(-1);
      }
      count_work(p);  // Python counts code points, not bytes
      return Value::integer(static_cast<std::int64_t>(codepoint_count(std::string_view(s).substr(0, p))));
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    bool (*test)(char) = name == "isdigit"   ? [](char c) { return c >= '0' && c <= '9'; }
                         : name == "isspace" ? [](char c) { return py_space(static_cast<unsigned char>(c)); }
                         : name == "isalpha" ? [](char c) { return is_alpha(c); }
                                             : [](char c) { return (c >= '0' && c <= '9') || is_alpha(c); };
    return method([test](const std::string& s, CallArgs&) {
      count_work(s.size());
      return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), test));
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

// The bytes of a dict's keys (copied into strings by items() and keys()).
std::uint64_t key_bytes(const Dict& d) {
  std::uint64_t n = 0;
  for (const auto& e : d) n += e.first.size();
  return n;
}

Value dict_method(const Value& self, const std::string& name) {
  const Value d = self;
  if (name == "items")
    return Value::function([d](CallArgs&) {
      count_work(key_bytes(*d.dict), d.dict->size());
      List out;
      for (const auto& [k, v] : *d.dict) out.push_back(Value::make_tuple({Value::string(k), v}));
      return Value::make_list(std::move(out));
    });
  if (name == "keys")
    return Value::function([d](CallArgs&) {
      count_work(key_bytes(*d.dict), d.dict->size());
      List out;
      for (const auto& [k, v] : *d.dict) out.push_back(Value::string(k));
      return Value::make_list(std::move(out));
    });
  if (name == "values")
    return Value::function([d](CallArgs&) {
      count_work(0, d.dict->size());
      List out;
      for (const auto& [k, v] : *d.dict) out.push_back(v);
      return Value::make_list(std::move(out));
    });
  if (name == "get")
    return Value::function([d](CallArgs& a) {
      const Value* key = arg(a, 0, "key");
      const Value* def = arg(a, 1, "default");
      if (!key) throw Error("get expected at least 1 argument");
      const Value* v = key->is_string() ? d.find(key->str()) : nullptr;
      return v ? *v : (def ? *def : Value::none());
    });
  return Value::undefined();
}

// Attribute path "a.b.c" as selectattr/map resolve it (item lookup per part).
Value attr_path(const Value& v, const std::string& path) {
  count_work(path.size());
  Value cur = v;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_undefined()) return cur;
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    std::int64_t index = 0;
    const bool as_index = numeric && std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    cur = as_index ? get_item(cur, Value::integer(index)) : get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_map(v.str(), to_lower));
  return v;
}

double round_half_even(double x, std::int64_t digits) {
  const double scale = std::pow(10.0, static_cast<double>(digits));
  const double y = x * scale;
  double r = std::nearbyint(y);  // default rounding mode: half to even
  return r / scale;
}

using FilterFn = Value (*)(Evaluator&, const Value&, CallArgs&);

List select_items(Evaluator& ev, const Value& seq, CallArgs& a, bool by_attr, bool keep) {
  List out;
  const std::size_t first = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) attr = str_arg(a, 0, "attribute", "selectattr");
  const Value* test = first < a.positional.size() ? &a.positional[first] : nullptr;
  for (const Value& item : iterate(seq)) {
    ev.step();
    const Value subject = by_attr ? attr_path(item, attr) : item;
    bool ok;
    if (!test) {
      ok = truthy(subject);
    } else {
      if (!test->is_string()) throw Error("select: test name must be a string");
      if (!is_known_test(test->str())) throw Error("no test named '" + test->str() + "'");
      CallArgs targs;
      for (std::size_t k = first + 1; k < a.positional.size(); ++k) targs.positional.push_back(a.positional[k]);
      ok = apply_test(ev, test->str(), subject, targs);
    }
    if (ok == keep) out.push_back(item);
  }
  return out;
}

Value filter_tojson(Evaluator&, const Value& v, CallArgs& a) {
  // transformers' override: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  JsonOptions o;
  o.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  if (const Value* ind = arg(a, 1, "indent"); ind && !ind->is_none()) {
    if (ind->kind != Value::Kind::Int) throw Error("tojson: indent must be an integer");
    o.indent = static_cast<int>(std::clamp<std::int64_t>(ind->i, 0, 64));
  }
  if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_sequence() || sep->list->size() != 2 || !(*sep->list)[0].is_string() || !(*sep->list)[1].is_string())
      throw Error("tojson: separators must be a pair of strings");
    o.has_separators = true;
    o.item_sep = (*sep->list)[0].str();
    o.key_sep = (*sep->list)[1].str();
  }
  o.sort_keys = bool_arg(a, 3, "sort_keys", false);
  if (v.is_undefined()) undefined_error(v);
  return Value::string(to_json(v, o));
}

Value filter_length(Evaluator&, const Value& v, CallArgs&) {
  switch (v.kind) {
    case Value::Kind::Undefined: return Value::integer(0);
    case Value::Kind::String:
      count_work(v.str().size());
      return Value::integer(static_cast<std::int64_t>(codepoint_count(v.str())));
    case Value::Kind::Array:
    case Value::Kind::Tuple: return Value::integer(static_cast<std::int64_t>(v.list->size()));
    case Value::Kind::Object: return Value::integer(static_cast<std::int64_t>(v.dict->size()));
    default: throw Error(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

Value filter_default(Evaluator&, const Value& v, CallArgs& a) {
  const Value* def = arg(a, 0, "default_value");
  const bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return def ? *def : Value::string("");
  return v;
}

Value filter_items(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::make_list();
  if (!v.is_mapping()) throw Error("items: can only get item pairs from a mapping");
  CallArgs none;
  return (*dict_method(v, "items").fn)(none);
}

Value filter_first_last(const Value& v, bool first) {
  if (v.is_undefined()) undefined_error(v);
  const char* const empty = first ? "No first item, sequence was empty." : "No last item, sequence was empty.";
  if (v.is_string()) {
    // Found in place: the first lead byte from the front, the last from the back.
    const std::string& s = v.str();
    auto lead = [&](std::size_t k) { return (static_cast<unsigned char>(s[k]) & 0xc0) != 0x80; };
    std::size_t k = first ? 0 : s.size();
    if (first) {
      while (k < s.size() && !lead(k)) ++k;
    } else {
      while (k > 0 && !lead(k - 1)) --k;
      if (k > 0) --k;
      else k = s.size();
    }
    count_work(first ? k : s.size() - k);
    if (k >= s.size()) return Value::undefined("No first item, sequence was empty.");
    return Value::string(s.substr(k, codepoint_length(s, k)));
  }
  if (v.is_sequence()) {
    if (v.list->empty()) return Value::undefined(empty);
    return first ? v.list->front() : v.list->back();
  }
  const List items = iterate(v);
  if (items.empty()) return Value::undefined(empty);
  return first ? items.front() : items.back();
}

Value filter_map(Evaluator& ev, const Value& v, CallArgs& a) {
  List out;
  if (const Value* attr = arg(a, 99, "attribute"); attr && a.positional.empty()) {
    if (!attr->is_string()) throw Error("map: attribute must be a string");
    const Value* def = arg(a, 99, "default");
    for (const Value& item : iterate(v)) {
      ev.step();
      Value r = attr_path(item, attr->str());
      out.push_back(r.is_undefined() && def ? *def : r);
    }
    return Value::make_list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) throw Error("map: expected a filter name or attribute=");
  const std::string filter = a.positional[0].str();
  if (!is_known_filter(filter)) throw Error("no filter named '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  std::uint64_t bytes = 0;
  for (const Value& item : iterate(v)) {
    ev.step();
    CallArgs copy = rest;
    out.push_back(apply_filter(ev, filter, item, copy));
    bytes += sizeof(Value) + out.back().str().size();
    ev.reserve(bytes, "map", 0, /*count=*/false);
  }
  return Value::make_list(std::move(out));
}

Value filter_join(Evaluator& ev, const Value& v, CallArgs& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attr = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  const std::string separator = sep ? to_str(*sep) : "";
  const std::string attribute = attr ? to_str(*attr) : "";
  for (const Value& item : iterate(v)) {
    ev.step();
    const Value value = attr ? attr_path(item, attribute) : item;
    std::string text;  // str() of what is not a string already
    const std::string& piece = value.is_string() ? value.str() : (text = to_str(value));
    ev.reserve(out.size() + (first ? 0 : separator.size()) + piece.size(), "join", 0, /*count=*/false);
    if (!first) out += separator;
    first = false;
    out += piece;
  }
  ev.reserve(out.size(), "join");  // counts the work of building it
  return Value::string(std::move(out));
}

Value filter_int(Evaluator&, const Value& v, CallArgs& a) {
  const Value* def = arg(a, 0, "default");
  const Value fallback = def ? *def : Value::integer(0);
  switch (v.kind) {
    case Value::Kind::Int: return v;
    case Value::Kind::Bool: return Value::integer(v.b);
    case Value::Kind::Float:
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
      return Value::integer(static_cast<std::int64_t>(v.f));
    case Value::Kind::String: {
      const std::string t = py_strip(v.str(), Value::none(), true, true);
      if (t.empty()) return fallback;
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(t.c_str(), &end, 10);
      if (errno == 0 && end && *end == '\0') return Value::integer(i);
      const double d = std::strtod(t.c_str(), &end);
      if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<std::int64_t>(d));
      return fallback;
    }
    default: return fallback;
  }
}

Value filter_float(Evaluator&, const Value& v, CallArgs& a) {
  const Value* def = arg(a, 0, "default");
  const Value fallback = def ? *def : Value::number(0.0);
  if (v.is_number()) return Value::number(v.kind == Value::Kind::Float ? v.f : static_cast<double>(v.kind == Value::Kind::Bool ? v.b : v.i));
  if (v.is_string()) {
    const std::string t = py_strip(v.str(), Value::none(), true, true);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == '\0') return Value::number(d);
  }
  return fallback;
}

Value filter_indent(Evaluator& ev, const Value& v, CallArgs& a) {
  const Value* w = arg(a, 0, "width");
  std::string ind = w && w->is_string() ? w->str() : std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(int_arg(a, 0, "width", 4), 0, 1024)), ' ');
  const bool first = bool_arg(a, 1, "first", false);
  const bool blank = bool_arg(a, 2, "blank", false);
  const std::string s = to_str(v) + "\n";
  // Line by line into the result, its size checked before each line is added
  // (every line can gain a whole `ind`).
  std::string out;
  std::size_t pos = 0;
  for (std::size_t k = 0; pos < s.size(); ++k) {
    const auto nl = s.find_first_of("\r\n", pos);
    const std::string_view line(s.data() + pos, nl - pos);
    const bool add = k == 0 ? first : (blank || !line.empty());
    ev.reserve(out.size() + 1 + (add ? ind.size() : 0) + line.size(), "indent", 0, /*count=*/false);
    if (k) out += "\n";
    if (add) out += ind;
    out += line;
    pos = nl + ((s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n') ? 2 : 1);
  }
  ev.reserve(out.size(), "indent");
  return Value::string(std::move(out));
}

Value filter_unique(Evaluator& ev, const Value& v, CallArgs& a) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attr = arg(a, 1, "attribute");
  List out, keys;
  for (const Value& item : iterate(v)) {
    ev.step(out.size() + 1);
    const Value key = sort_key(attr ? attr_path(item, to_str(*attr)) : item, cs);
    if (std::none_of(keys.begin(), keys.end(), [&](const Value& k) { return equal(k, key); })) {
      keys.push_back(key);
      out.push_back(item);
    }
  }
  return Value::make_list(std::move(out));
}

Value filter_sort(Evaluator& ev, const Value& v, CallArgs& a) {
  const bool rev = bool_arg(a, 0, "reverse", false);
  const bool cs = bool_arg(a, 1, "case_sensitive", false);
  const Value* attr = arg(a, 2, "attribute");
  List items = iterate(v);
  ev.step(items.size() * 8);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(attr ? attr_path(x, to_str(*attr)) : x, cs);
    const Value ky = sort_key(attr ? attr_path(y, to_str(*attr)) : y, cs);
    return rev ? less(ky, kx) : less(kx, ky);
  });
  return Value::make_list(std::move(items));
}

Value filter_reverse(Evaluator&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    // Code points from the back, each ending where the one after it starts.
    const std::string& s = v.str();
    count_work(s.size());
    std::string out;
    out.reserve(s.size());
    std::size_t end = s.size();
    for (std::size_t k = s.size(); k-- > 0;) {
      if ((static_cast<unsigned char>(s[k]) & 0xc0) == 0x80) continue;
      out.append(s, k, end - k);
      end = k;
    }
    return Value::string(std::move(out));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

Value filter_round(Evaluator&, const Value& v, CallArgs& a) {
  const std::int64_t precision = std::clamp<std::int64_t>(int_arg(a, 0, "precision", 0), -20, 20);
  const Value* method = arg(a, 1, "method");
  const std::string m = method ? to_str(*method) : "common";
  if (!v.is_number()) throw Error("round: value must be a number");
  const double x = v.kind == Value::Kind::Float ? v.f : static_cast<double>(v.kind == Value::Kind::Bool ? v.b : v.i);
  const double scale = std::pow(10.0, static_cast<double>(precision));
  if (m == "common") {
    if (v.kind != Value::Kind::Float) return Value::integer(v.kind == Value::Kind::Bool ? v.b : v.i);
    return Value::number(round_half_even(x, precision));
  }
  if (m == "ceil") return Value::number(std::ceil(x * scale) / scale);
  if (m == "floor") return Value::number(std::floor(x * scale) / scale);
  throw Error("round: method must be 'common', 'ceil' or 'floor'");
}

Value filter_sum_min_max(Evaluator& ev, const Value& v, CallArgs& a, int which) {
  const List items = iterate(v);
  ev.step(items.size());
  const Value* attr = arg(a, which == 0 ? 0 : 1, "attribute");
  auto key = [&](const Value& x) { return attr ? attr_path(x, to_str(*attr)) : x; };
  if (which == 0) {
    const Value* start = arg(a, 1, "start");
    double f = 0;
    std::int64_t i = start && start->kind == Value::Kind::Int ? start->i : 0;
    bool is_float = start && start->kind == Value::Kind::Float;
    if (is_float) f = start->f;
    for (const Value& x : items) {
      const Value k = key(x);
      if (!k.is_number()) throw Error("sum: values must be numbers");
      if (k.kind == Value::Kind::Float && !is_float) { is_float = true; f = static_cast<double>(i); }
      if (is_float) f += k.kind == Value::Kind::Float ? k.f : static_cast<double>(k.kind == Value::Kind::Bool ? k.b : k.i);
      else if (__builtin_add_overflow(i, k.kind == Value::Kind::Bool ? k.b : k.i, &i)) throw Error("integer overflow");
    }
    return is_float ? Value::number(f) : Value::integer(i);
  }
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  Value best = items[0];
  for (const Value& x : items) {
    const bool better = which == 1 ? less(sort_key(key(x), cs), sort_key(key(best), cs)) : less(sort_key(key(best), cs), sort_key(key(x), cs));
    if (better) best = x;
  }
  return best;
}

struct FilterEntry {
  const char* name;
  Value (*fn)(Evaluator&, const Value&, CallArgs&);
};

// str(v) without copying a string: anything else is printed into `buf`.
const std::string& str_of(const Value& v, std::string& buf) { return v.is_string() ? v.str() : (buf = to_str(v)); }

// A filter of one string argument: str(v) as the string filters see it.
template <std::string (*F)(const std::string&)>
Value string_filter(Evaluator&, const Value& v, CallArgs&) {
  std::string buf;
  return Value::string(F(str_of(v, buf)));
}
std::string upper(const std::string& s) { return ascii_map(s, to_upper); }
std::string lower(const std::string& s) { return ascii_map(s, to_lower); }

const FilterEntry kFilters[] = {
    {"trim", [](Evaluator&, const Value& v, CallArgs& a) {
       const Value* c = arg(a, 0, "chars");
       std::string buf;
       return Value::string(py_strip(str_of(v, buf), c ? *c : Value::none(), true, true));
     }},
    {"tojson", filter_tojson},
    {"length", filter_length},
    {"count", filter_length},
    {"string", [](Evaluator&, const Value& v, CallArgs&) { return v.is_string() ? v : Value::string(to_str(v)); }},
    {"safe", [](Evaluator&, const Value& v, CallArgs&) { return v.is_string() ? v : Value::string(to_str(v)); }},
    {"upper", string_filter<upper>},
    {"lower", string_filter<lower>},
    {"capitalize", string_filter<capitalize>},
    {"title", string_filter<title_case>},
    {"default", filter_default},
    {"d", filter_default},
    {"items", filter_items},
    {"list", [](Evaluator&, const Value& v, CallArgs&) {
       if (v.is_undefined()) undefined_error(v);
       return Value::make_list(iterate(v));
     }},
    {"first", [](Evaluator&, const Value& v, CallArgs&) { return filter_first_last(v, true); }},
    {"last", [](Evaluator&, const Value& v, CallArgs&) { return filter_first_last(v, false); }},
    {"selectattr", [](Evaluator& ev, const Value& v, CallArgs& a) { return Value::make_list(select_items(ev, v, a, true, true)); }},
    {"rejectattr", [](Evaluator& ev, const Value& v, CallArgs& a) { return Value::make_list(select_items(ev, v, a, true, false)); }},
    {"select", [](Evaluator& ev, const Value& v, CallArgs& a) { return Value::make_list(select_items(ev, v, a, false, true)); }},
    {"reject", [](Evaluator& ev, const Value& v, CallArgs& a) { return Value::make_list(select_items(ev, v, a, false, false)); }},
    {"map", filter_map},
    {"join", filter_join},
    {"replace", [](Evaluator&, const Value& v, CallArgs& a) {
       const Value* from = arg(a, 0, "old");
       const Value* to = arg(a, 1, "new");
       if (!from || !to) throw Error("replace: needs 'old' and 'new'");
       std::string s_buf, from_buf, to_buf;
       return Value::string(replace_all(str_of(v, s_buf), str_of(*from, from_buf), str_of(*to, to_buf),
                                        int_arg(a, 2, "count", -1)));
     }},
    {"int", filter_int},
    {"float", filter_float},
    {"abs", [](Evaluator&, const Value& v, CallArgs&) {
       if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
       if (v.kind == Value::Kind::Int) {
         if (v.i == INT64_MIN) throw Error("integer overflow");
         return Value::integer(v.i < 0 ? -v.i : v.i);
       }
       if (v.kind == Value::Kind::Bool) return Value::integer(v.b);
       throw Error(std::string("bad operand type for abs(): '") + type_name(v) + "'");
     }},
    {"round", filter_round},
    {"indent", filter_indent},
    {"unique", filter_unique},
    {"reverse", filter_reverse},
    {"sort", filter_sort},
    {"sum", [](Evaluator& ev, const Value& v, CallArgs& a) { return filter_sum_min_max(ev, v, a, 0); }},
    {"min", [](Evaluator& ev, const Value& v, CallArgs& a) { return filter_sum_min_max(ev, v, a, 1); }},
    {"max", [](Evaluator& ev, const Value& v, CallArgs& a) { return filter_sum_min_max(ev, v, a, 2); }},
    {"attr", [](Evaluator&, const Value& v, CallArgs& a) { return get_attr(v, str_arg(a, 0, "name", "attr")); }},
};

const FilterEntry* find_filter(const std::string& name) {
  for (const auto& f : kFilters)
    if (name == f.name) return &f;
  return nullptr;
}

const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
                              "mapping", "iterable", "sequence", "true", "false", "equalto", "eq", "==", "ne", "!=",
                              "odd", "even", "in", "callable", "divisibleby", "lower", "upper", "gt", "lt", "ge", "le",
                              "greaterthan", "lessthan", "sameas"};
const char* const kTestsWithArg[] = {"equalto", "eq", "ne", "in", "divisibleby", "gt", "lt", "ge", "le",
                                     "greaterthan", "lessthan", "sameas"};

}  // namespace

[[noreturn]] void undefined_error(const Value& v) {
  throw Error(v.str().empty() ? std::string("value is undefined") : v.str());
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  // The code points of `chars` as a bitmap (at most 2^21 bits): constant time
  // per byte of `chars`, however many there are.
  std::vector<bool> in_chars;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) {
    if (!chars.is_string()) throw Error("strip arg must be None or str");
    const std::string& c = chars.str();
    count_work(c.size());
    for (std::size_t k = 0; k < c.size();) {
      const std::uint32_t cp = decode_at(c, k);
      if (cp >= in_chars.size()) in_chars.resize(cp + 1);
      in_chars[cp] = true;
    }
  }
  auto strip_cp = [&](std::uint32_t c) { return whitespace ? py_space(c) : c < in_chars.size() && in_chars[c]; };
  count_work(s.size());  // what it strips and what it copies
  // Byte offsets walked in place: a code point index would cost 8 bytes per
  // byte of a (possibly huge) message.
  std::size_t b = 0, e = s.size();
  if (left)
    while (b < e) {
      std::size_t k = b;
      if (!strip_cp(decode_at(s, k))) break;
      b = k;
    }
  if (right)
    while (e > b) {
      std::size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xc0) == 0x80) --k;  // start of the last code point
      std::size_t n = k;
      if (!strip_cp(decode_at(s, n))) break;
      e = k;
    }
  return s.substr(b, e - b);
}

bool is_known_filter(const std::string& name) { return find_filter(name) != nullptr; }

bool is_known_test(const std::string& name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; });
}

bool test_takes_argument(const std::string& name) {
  return std::any_of(std::begin(kTestsWithArg), std::end(kTestsWithArg), [&](const char* t) { return name == t; });
}

Value apply_filter(Evaluator& ev, const std::string& name, const Value& subject, CallArgs& args) {
  const FilterEntry* f = find_filter(name);
  if (!f) throw Error("unknown filter '" + name + "'");
  return f->fn(ev, subject, args);
}

bool apply_test(Evaluator&, const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  const Value* other = arg(a, 0, "value");
  auto need = [&]() -> const Value& {
    if (!other) throw Error("test '" + name + "' needs an argument");
    return *other;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "mapping") return v.kind == K::Object;
  if (name == "iterable") return v.is_string() || v.is_sequence() || v.kind == K::Object || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_sequence() || v.kind == K::Object || v.is_undefined();
  if (name == "true") return v.kind == K::Bool && v.b;
  if (name == "false") return v.kind == K::Bool && !v.b;
  if (name == "callable") return v.kind == K::Callable;
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, need());
  if (name == "ne" || name == "!=") return !equal(v, need());
  if (name == "sameas") {
    const Value& o = need();
    if (v.kind != o.kind) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind == K::Bool) return v.b == o.b;
    return v.list ? v.list == o.list : v.dict ? v.dict == o.dict : equal(v, o);
  }
  if (name == "gt" || name == "greaterthan") return less(need(), v);
  if (name == "lt" || name == "lessthan") return less(v, need());
  if (name == "ge") return !less(v, need());
  if (name == "le") return !less(need(), v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != K::Int && v.kind != K::Bool) throw Error("test '" + name + "' needs an integer");
    const std::int64_t x = v.kind == K::Bool ? v.b : v.i;
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    const Value& d = need();
    if (d.kind != K::Int || d.i == 0) throw Error("divisibleby needs a non-zero integer");
    return x % d.i == 0;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return v.str() == ascii_map(v.str(), name == "lower" ? to_lower : to_upper);
  }
  if (name == "in") {
    const Value& seq = need();
    if (seq.is_string()) {
      if (!v.is_string()) throw Error(std::string("'in <string>' requires string as left operand, not ") + type_name(v));
      return find_sub(seq.str(), v.str()) != std::string::npos;
    }
    if (seq.is_mapping()) return v.is_string() && seq.find(v.str()) != nullptr;
    if (seq.is_sequence())
      return std::any_of(seq.list->begin(), seq.list->end(), [&](const Value& x) {
        count_work(0, 1);
        return equal(x, v);
      });
    if (seq.is_undefined()) return false;
    throw Error(std::string("argument of type '") + type_name(seq) + "' is not iterable");
  }
  throw Error("unknown test '" + name + "'");
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Value::Kind::Object: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::Namespace:
      if (const Value* v = obj.find(name)) return *v;
      return Value::undefined("'" + std::string(type_name(obj)) + " object' has no attribute '" + name + "'");
    case Value::Kind::String: return string_method(obj, name);
    default: return Value::undefined("'" + std::string(type_name(obj)) + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.kind == Value::Kind::Object || obj.kind == Value::Kind::Namespace) {
    if (key.is_string()) {
      if (const Value* v = obj.find(key.str())) return *v;
      if (obj.kind == Value::Kind::Object) {
        Value m = dict_method(obj, key.str());
        if (!m.is_undefined()) return m;
      }
    }
    return Value::undefined("'dict object' has no attribute " + repr(key));
  }
  if ((obj.is_sequence() || obj.is_string()) && (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool)) {
    std::int64_t i = key.kind == Value::Kind::Bool ? key.b : key.i;
    if (obj.is_string()) {
      // Walked in place, not through a code point index (8 bytes per byte).
      const std::string& s = obj.str();
      count_work(s.size());
      const auto n = static_cast<std::int64_t>(codepoint_count(s));
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("string index out of range");
      std::size_t pos = 0;
      for (std::int64_t seen = -1; pos < s.size(); ++pos)
        if ((static_cast<unsigned char>(s[pos]) & 0xc0) != 0x80 && ++seen == i) break;
      return Value::string(s.substr(pos, codepoint_length(s, pos)));
    }
    const auto n = static_cast<std::int64_t>(obj.list->size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(std::string(type_name(obj)) + " object has no element " + std::to_string(key.i));
    return (*obj.list)[static_cast<std::size_t>(i)];
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("'" + std::string(type_name(obj)) + " object' has no attribute " + repr(key));
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::Array:
    case Value::Kind::Tuple:
      count_work(0, v.list->size());  // the elements are copied
      return *v.list;
    case Value::Kind::Object: {
      count_work(key_bytes(*v.dict), v.dict->size());
      List out;
      for (const auto& [k, e] : *v.dict) out.push_back(Value::string(k));
      return out;
    }
    case Value::Kind::String: {
      const std::string& s = v.str();
      const std::uint64_t n = codepoint_count(s);
      reserve_value(n * sizeof(Value) + s.size(), "iterating over the characters of a string", n);
      List out;
      out.reserve(n);
      for_each_codepoint(s, [&](std::size_t k, std::size_t len) { out.push_back(Value::string(s.substr(k, len))); });
      return out;
    }
    default: throw Error(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

}  // namespace fp8lm::chat
