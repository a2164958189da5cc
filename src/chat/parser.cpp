#include "chat/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "chat/builtins.h"
#include "chat/lexer.h"
#include "common/error.h"

namespace fp8lm::chat {
namespace {

// The parser's own recursion (brackets, unary operators, blocks) deeper than
// this is refused so that hostile templates cannot overflow its stack; the
// trees it builds are bounded by kMaxExpressionDepth.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse() {
    Body body = parse_body({});
    if (peek().type != Token::Type::Eof) fail("unexpected '" + peek_tag() + "'");
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { const Token& t = peek(); if (i_ < t_.size() - 1) ++i_; return t; }
  [[noreturn]] void fail(const std::string& what) const { fail_at(peek().line, what); }
  [[noreturn]] static void fail_at(int line, const std::string& what) {
    throw Error("chat template line " + std::to_string(line) + ": " + what);
  }
  bool is_op(const char* op, std::size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Op && peek(ahead).text == op;
  }
  bool is_name(const char* n, std::size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Name && peek(ahead).text == n;
  }
  bool accept_op(const char* op) { if (is_op(op)) { next(); return true; } return false; }
  bool accept_name(const char* n) { if (is_name(n)) { next(); return true; } return false; }
  void expect_op(const char* op) { if (!accept_op(op)) fail(std::string("expected '") + op + "', got '" + describe(peek()) + "'"); }
  std::string expect_name() {
    if (peek().type != Token::Type::Name) fail("expected a name, got '" + describe(peek()) + "'");
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (peek().type != Token::Type::BlockEnd) fail("expected end of '" + tag + "' tag, got '" + describe(peek()) + "'");
    next();
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Token::Type::Eof: return "end of template";
      case Token::Type::BlockEnd: return "%}";
      case Token::Type::VarEnd: return "}}";
      case Token::Type::Text: return "text";
      default: return t.text;
    }
  }
  std::string peek_tag() const { return peek().type == Token::Type::BlockBegin ? peek(1).text : describe(peek()); }

  struct DepthGuard {
    int& d;
    DepthGuard(int& depth, const Parser& p) : d(depth) { if (++d > kMaxDepth) p.fail("nesting too deep"); }
    ~DepthGuard() { --d; }
  };

  // ---- statements ----
  // Parses until a block tag named in `ends` (left unconsumed) or end of input.
  Body parse_body(std::initializer_list<const char*> ends) {
    DepthGuard guard(depth_, *this);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Token::Type::Eof) {
        if (ends.size() != 0) fail(std::string("unclosed block: expected '") + *ends.begin() + "' before end of template");
        return body;
      }
      if (t.type == Token::Type::Text) {
        auto n = node(Node::Kind::Text);
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (t.type == Token::Type::VarBegin) {
        next();
        auto n = node(Node::Kind::Output);
        n->expr = parse_expression();
        if (peek().type != Token::Type::VarEnd) fail("expected '}}', got '" + describe(peek()) + "'");
        next();
        body.push_back(std::move(n));
      } else if (t.type == Token::Type::BlockBegin) {
        const Token& name = peek(1);
        if (name.type != Token::Type::Name) { next(); fail("expected a tag name after '{%'"); }
        for (const char* e : ends)
          if (name.text == e) return body;
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
  }

  NodePtr node(Node::Kind k) const { auto n = std::make_unique<Node>(); n->kind = k; n->line = peek().line; return n; }

  // After "{% name ...": consumes the closing "{% end %}" tag.
  void end_tag(const char* name) {
    next();  // BlockBegin
    next();  // the name
    expect_block_end(name);
  }

  NodePtr parse_statement() {
    const int line = peek().line;
    const std::string tag = next().text;
    NodePtr n;
    if (tag == "if") n = parse_if();
    else if (tag == "for") n = parse_for();
    else if (tag == "set") n = parse_set();
    else if (tag == "macro") n = parse_macro();
    else if (tag == "call") n = parse_call_block();
    else if (tag == "filter") n = parse_filter_block();
    else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      n = node(tag == "break" ? Node::Kind::Break : Node::Kind::Continue);
      expect_block_end(tag);
    } else if (tag == "generation") {
      // transformers' {% generation %} marks assistant text for masks; it renders its body.
      n = node(Node::Kind::Scope);
      expect_block_end(tag);
      n->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
    } else {
      fail_at(line, "unsupported tag '" + tag + "'");
    }
    n->line = line;
    return n;
  }

  NodePtr parse_if() {
    auto n = node(Node::Kind::If);
    ExprPtr cond = parse_expression();
    expect_block_end("if");
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      next();
      const std::string tag = next().text;
      if (tag == "elif") { cond = parse_expression(); expect_block_end("elif"); continue; }
      if (tag == "else") {
        expect_block_end("else");
        n->else_body = parse_body({"endif"});
        end_tag("endif");
      } else {
        expect_block_end("endif");
      }
      return n;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    do names.push_back(expect_name()); while (accept_op(","));
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for() {
    auto n = node(Node::Kind::For);
    n->targets = parse_targets();
    if (!accept_name("in")) fail("expected 'in' in 'for' tag");
    n->expr = parse_tuple_or_expr(/*with_condexpr=*/false);
    if (accept_name("if")) n->cond = parse_expression();
    if (accept_name("recursive")) fail("unsupported 'recursive' loop");
    expect_block_end("for");
    ++loop_depth_;
    n->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (is_name("else", 1)) {
      end_tag("else");
      n->else_body = parse_body({"endfor"});
    }
    end_tag("endfor");
    return n;
  }

  NodePtr parse_set() {
    const std::string first = expect_name();
    if (accept_op(".")) {
      auto n = node(Node::Kind::Set);
      n->text = first;
      n->attr = expect_name();
      expect_op("=");
      n->expr = parse_tuple_or_expr(true);
      expect_block_end("set");
      return n;
    }
    std::vector<std::string> names{first};
    while (accept_op(",")) names.push_back(expect_name());
    if (names.size() == 1 && peek().type == Token::Type::BlockEnd) {
      next();
      auto n = node(Node::Kind::SetBlock);
      n->text = first;
      n->body = parse_body({"endset"});
      end_tag("endset");
      return n;
    }
    if (names.size() == 1 && accept_op("|")) fail("unsupported filtered block 'set'");
    auto n = node(Node::Kind::Set);
    expect_op("=");
    n->expr = parse_tuple_or_expr(true);
    if (names.size() == 1) n->text = first;
    else n->targets = std::move(names);
    expect_block_end("set");
    return n;
  }

  void parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    if (!accept_op(")")) {
      do {
        std::string name = expect_name();
        ExprPtr def;
        if (accept_op("=")) def = parse_expression();
        params.emplace_back(std::move(name), std::move(def));
      } while (accept_op(","));
      expect_op(")");
    }
  }

  NodePtr parse_macro() {
    auto n = node(Node::Kind::Macro);
    n->text = expect_name();
    parse_params(n->params);
    expect_block_end("macro");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    end_tag("endmacro");
    return n;
  }

  NodePtr parse_call_block() {
    auto n = node(Node::Kind::CallBlock);
    if (is_op("(")) parse_params(n->params);
    n->expr = parse_expression();
    if (n->expr->kind != Expr::Kind::Call) fail("expected a call in 'call' tag");
    expect_block_end("call");
    n->body = parse_body({"endcall"});
    end_tag("endcall");
    return n;
  }

  NodePtr parse_filter_block() {
    auto n = node(Node::Kind::FilterBlock);
    auto holder = std::make_unique<Expr>();
    holder->kind = Expr::Kind::Literal;
    n->expr = parse_filters(std::move(holder), /*first_done=*/false);
    expect_block_end("filter");
    n->body = parse_body({"endfilter"});
    end_tag("endfilter");
    return n;
  }

  // ---- expressions ----
  ExprPtr make(Expr::Kind k, int line) { auto e = std::make_unique<Expr>(); e->kind = k; e->line = line; return e; }

  // Every node with operands passes here once they are attached: its height
  // is checked before anything is built on it, so no tree (nor its
  // destructor, which recurses too) ever exceeds the bound.
  ExprPtr finish(ExprPtr e) const {
    int below = 0;
    for (const auto& a : e->args)
      if (a) below = std::max(below, a->height);
    for (const auto& [key, v] : e->kwargs) below = std::max(below, v->height);
    e->height = below + 1;
    if (e->height > kMaxExpressionDepth)
      fail_at(e->line, "expression nests deeper than " + std::to_string(kMaxExpressionDepth) + " levels");
    return e;
  }

  ExprPtr parse_tuple_or_expr(bool with_condexpr) {
    const int line = peek().line;
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::TupleLit, line);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().type == Token::Type::BlockEnd || peek().type == Token::Type::VarEnd || is_name("if") || is_op(")")) break;
      t->args.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return finish(std::move(t));
  }

  ExprPtr parse_expression() {
    DepthGuard guard(depth_, *this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::Cond, line);
      ExprPtr cond = parse_or();
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(accept_name("else") ? parse_expression() : nullptr);
      e = finish(std::move(c));
    }
    return e;
  }

  ExprPtr binary(Expr::Kind k, std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = make(k, line);
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return finish(std::move(b));
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) { const int line = next().line; l = binary(Expr::Kind::Or, "or", std::move(l), parse_and(), line); }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) { const int line = next().line; l = binary(Expr::Kind::And, "and", std::move(l), parse_not(), line); }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(depth_, *this);
      const int line = next().line;
      auto n = make(Expr::Kind::Not, line);
      n->args.push_back(parse_not());
      return finish(std::move(n));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    // Chained comparisons (a < b < c) become (a < b) and (b < c) without
    // re-evaluating b only in Python; templates never chain with side effects.
    while (true) {
      const int line = peek().line;
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="})
        if (is_op(o)) op = o;
      if (!op.empty()) next();
      else if (is_name("in")) { next(); op = "in"; }
      else if (is_name("not") && is_name("in", 1)) { next(); next(); op = "not in"; }
      else return l;
      l = binary(Expr::Kind::Binary, op, std::move(l), parse_math1(), line);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) { const Token& t = next(); l = binary(Expr::Kind::Binary, t.text, std::move(l), parse_concat(), t.line); }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) { const int line = next().line; l = binary(Expr::Kind::Binary, "~", std::move(l), parse_math2(), line); }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      l = binary(Expr::Kind::Binary, t.text, std::move(l), parse_pow(), t.line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) { const int line = next().line; l = binary(Expr::Kind::Binary, "**", std::move(l), parse_unary(true), line); }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(depth_, *this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(t.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, t.line);
      e->args.push_back(parse_unary(false));
      e = finish(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(e), true) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    const int line = t.line;
    switch (t.type) {
      case Token::Type::Name: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), line);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), line);
        auto n = make(Expr::Kind::Name, line);
        n->name = t.text;
        return n;
      }
      case Token::Type::String: {
        std::string s = next().text;
        while (peek().type == Token::Type::String) s += next().text;  // adjacent literals join
        return literal(Value::string(std::move(s)), line);
      }
      case Token::Type::Int: {
        const std::string text = next().text;
        std::int64_t v = 0;
        const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
        if (r.ec != std::errc()) fail_at(line, "integer literal too large: " + text);
        return literal(Value::integer(v), line);
      }
      case Token::Type::Float: return literal(Value::number(std::strtod(next().text.c_str(), nullptr)), line);
      case Token::Type::Op:
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(Expr::Kind::TupleLit, line);
          ExprPtr e = parse_tuple_or_expr(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto l = make(Expr::Kind::ListLit, line);
          while (!accept_op("]")) {
            if (!l->args.empty()) { expect_op(","); if (accept_op("]")) break; }
            l->args.push_back(parse_expression());
          }
          return finish(std::move(l));
        }
        if (t.text == "{") {
          next();
          auto d = make(Expr::Kind::DictLit, line);
          while (!accept_op("}")) {
            if (!d->args.empty()) { expect_op(","); if (accept_op("}")) break; }
            d->args.push_back(parse_expression());
            expect_op(":");
            d->args.push_back(parse_expression());
          }
          return finish(std::move(d));
        }
        break;
      default: break;
    }
    fail("unexpected '" + describe(t) + "' in expression");
  }

  ExprPtr literal(Value v, int line) { auto e = make(Expr::Kind::Literal, line); e->value = std::move(v); return e; }

  void parse_call_args(Expr& call) {
    // After '(' : positional then keyword arguments, until ')'. call.args
    // already holds the callee (or the filtered value), so count separately.
    std::size_t count = 0;
    while (!accept_op(")")) {
      if (count++ > 0) { expect_op(","); if (accept_op(")")) break; }
      if (is_op("*") || is_op("**")) fail("unsupported '*args' / '**kwargs' in call");
      if (peek().type == Token::Type::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail("positional argument after keyword argument");
        call.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (accept_op(".")) {
        auto a = make(Expr::Kind::Attr, line);
        if (peek().type == Token::Type::Int) {  // foo.0 is foo[0] in Jinja
          a->kind = Expr::Kind::Item;
          a->args.push_back(std::move(e));
          const std::string text = next().text;
          std::int64_t v = 0;
          if (std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc()) fail_at(line, "bad index ." + text);
          a->args.push_back(literal(Value::integer(v), line));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = finish(std::move(a));
      } else if (accept_op("[")) {
        e = parse_subscript(std::move(e), line);
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::Call, line);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = finish(std::move(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (!is_op(":") && !is_op("]")) parts[n] = parse_expression();
      if (accept_op(":")) {
        is_slice = true;
        if (++n > 2) fail("too many ':' in slice");
        continue;
      }
      expect_op("]");
      break;
    }
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript");
      auto it = make(Expr::Kind::Item, line);
      it->args.push_back(std::move(obj));
      it->args.push_back(std::move(parts[0]));
      return finish(std::move(it));
    }
    auto s = make(Expr::Kind::Slice, line);
    s->args.push_back(std::move(obj));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return finish(std::move(s));
  }

  ExprPtr parse_filters(ExprPtr e, bool first_done) {
    while (true) {
      if (first_done && is_op("|")) next();
      else if (first_done && is_name("is")) { e = parse_test(std::move(e)); continue; }
      else if (first_done) return e;
      first_done = true;
      const int line = peek().line;
      auto f = make(Expr::Kind::Filter, line);
      f->name = expect_name();
      while (accept_op(".")) f->name += "." + expect_name();
      if (!is_known_filter(f->name)) fail_at(line, "unknown filter '" + f->name + "'");
      f->args.push_back(std::move(e));
      if (accept_op("(")) parse_call_args(*f);
      e = finish(std::move(f));
    }
  }

  ExprPtr parse_test(ExprPtr e) {
    const int line = next().line;  // 'is'
    auto t = make(Expr::Kind::Test, line);
    t->negated = accept_name("not");
    t->name = expect_name();
    if (!is_known_test(t->name)) fail_at(line, "unknown test '" + t->name + "'");
    t->args.push_back(std::move(e));
    if (accept_op("(")) {
      parse_call_args(*t);
    } else if (test_takes_argument(t->name) && (peek().type == Token::Type::Name || peek().type == Token::Type::String ||
                                                peek().type == Token::Type::Int || peek().type == Token::Type::Float ||
                                                is_op("[") || is_op("{") || is_op("-")) &&
               !is_name("and") && !is_name("or") && !is_name("else") && !is_name("if") && !is_name("is") &&
               !is_name("in") && !is_name("not")) {
      t->args.push_back(parse_postfix(parse_unary_arg()));
    }
    return finish(std::move(t));
  }

  ExprPtr parse_unary_arg() {
    if (is_op("-")) {
      const int line = next().line;
      auto n = make(Expr::Kind::Neg, line);
      n->args.push_back(parse_primary());
      return finish(std::move(n));
    }
    return parse_primary();
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) { return Parser(tokenize(source)).parse(); }

}  // namespace fp8lm::chat
