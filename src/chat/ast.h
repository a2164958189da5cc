// The syntax tree of a chat template: expressions and statements.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace fp8lm::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using Kwargs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    Attr,      // args[0].name
    Item,      // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    Call,      // args[0](args[1..], kwargs)
    Filter,    // args[0] | name(args[1..], kwargs)
    Test,      // args[0] is [not] name(args[1..]); negated
    Neg, Pos, Not,
    Binary,    // args[0] op args[1] (arithmetic, ~, comparisons, in, not in)
    And, Or,
    Cond,      // args[1] if args[0] else args[2] (args[2] null: undefined)
    ListLit, TupleLit, DictLit,  // DictLit: args = k0, v0, k1, v1, ...
  };
  Kind kind;
  int line = 0;
  int height = 1;    // levels of expressions in this subtree, this one included (the parser bounds it)
  std::string name;  // Name/Attr/Filter/Test name, Binary operator
  bool negated = false;
  Value value;
  std::vector<ExprPtr> args;
  Kwargs kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue, Scope };
  Kind kind;
  int line = 0;
  std::string text;                  // Text; Set/SetBlock/Macro: target name
  std::string attr;                  // Set: `ns.attr` target (name is the namespace)
  std::vector<std::string> targets;  // For / tuple Set: the names bound
  ExprPtr expr;                      // Output, For iterable, Set value, CallBlock call, FilterBlock filter
  ExprPtr cond;                      // For: `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body) in order
  Body body;                         // For/SetBlock/Macro/CallBlock/FilterBlock/Scope body
  Body else_body;                    // If/For else
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters (default or null)
};

}  // namespace fp8lm::chat
