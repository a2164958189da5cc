// Filters, tests, and the methods of str / dict that chat templates call,
// with the semantics of Jinja2 and Python.
#pragma once

#include <string>

#include "chat/value.h"

namespace fp8lm::chat {

class Evaluator;

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
bool test_takes_argument(const std::string& name);  // `x is eq 3` without parentheses

Value apply_filter(Evaluator& ev, const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& subject, CallArgs& args);

// `obj.name` (attribute first, then item) and `obj[key]` (item first, then
// attribute), as Jinja2's sandbox resolves them; missing gives Undefined.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// The elements a `for` loop or a filter sees (dict: keys, str: characters).
List iterate(const Value& v);

// Throws the error Jinja2 raises when an Undefined is used as a value.
[[noreturn]] void undefined_error(const Value& v);

// Python's str.strip family: chars empty/None means whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace fp8lm::chat
