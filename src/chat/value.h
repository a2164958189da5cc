// The values a chat template computes with: Python's types as Jinja2 sees
// them (None, bool, int, float, str, list, tuple, dict, namespace, callables
// and Jinja's Undefined), with Python's truthiness, equality, ordering, str()
// and repr(), and json.dumps as transformers' tojson filter calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp8lm::chat {

struct Value;
using List = std::vector<Value>;
// Python dicts keep insertion order, and tojson / items() print in that
// order, so a dict is an ordered list of pairs (chat dicts are small).
using Dict = std::vector<std::pair<std::string, Value>>;

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(CallArgs&)>;

// How deeply values may nest (lists, dicts, namespaces in one another): the
// walks over a value (==, <, str(), tojson) recurse once per level, so a
// deeper value (`set x = [x]` in a loop, a namespace holding itself, JSON
// input) is refused by name instead of overflowing the stack.
inline constexpr int kMaxValueDepth = 512;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, Array, Tuple, Object, Namespace, Callable };

  Kind kind = Kind::Undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0.0;
  // String: its bytes; Undefined: why it is undefined (for error messages).
  // Shared and never changed, as Python's str is immutable: copying a Value
  // (reading a variable, passing an argument, building a list) copies no
  // bytes, so only the operations that read or write bytes are charged as
  // work (eval.h's kBytesPerStep).
  std::shared_ptr<const std::string> text;
  // Containers and namespaces are shared: Jinja's namespace() is mutated
  // through `set ns.x`, and every holder must see the change.
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> fn;

  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  // Destroys the containers only this value holds with a loop, not one
  // stack frame per level of nesting (see value.cpp).
  ~Value();

  const std::string& str() const;  // text, or "" when there is none

  static Value undefined(std::string why = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v = {});
  static Value make_tuple(List v);
  static Value make_dict(Dict v = {});
  static Value make_namespace(Dict v = {});
  static Value function(Function f);
  // Throws fp8lm::Error when `j` nests deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_sequence() const { return kind == Kind::Array || kind == Kind::Tuple; }
  bool is_mapping() const { return kind == Kind::Object || kind == Kind::Namespace; }

  // Dict (or namespace) member, or nullptr. Counts the keys it compares as
  // work (a dict may hold many long keys).
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

const char* type_name(const Value& v);  // Python's type name, for messages
bool truthy(const Value& v);
// The walks below count the bytes and elements they compare or write as
// work, and throw fp8lm::Error for values nested deeper than kMaxValueDepth.
bool equal(const Value& a, const Value& b);
// Python's `<`; throws fp8lm::Error for types Python cannot order.
bool less(const Value& a, const Value& b);
std::string to_str(const Value& v);   // str(v); Undefined prints as ""
std::string repr(const Value& v);     // repr(v)
std::string python_float_repr(double d);

struct JsonOptions {
  int indent = -1;  // -1: None (one line, ", " and ": ")
  bool sort_keys = false;
  bool ensure_ascii = false;
  bool has_separators = false;
  std::string item_sep, key_sep;
};
// json.dumps(v, ...) exactly as Python writes it.
std::string to_json(const Value& v, const JsonOptions& options);

// UTF-8 helpers: Python indexes strings by code point.
std::vector<std::size_t> codepoint_offsets(const std::string& s);  // start of each code point, plus s.size()
std::size_t codepoint_count(std::string_view s);

}  // namespace fp8lm::chat
