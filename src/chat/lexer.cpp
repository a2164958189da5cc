#include "chat/lexer.h"

#include <cstring>

#include "common/error.h"

namespace fp8lm::chat {
namespace {

[[noreturn]] void fail(int line, const std::string& what) {
  throw Error("chat template line " + std::to_string(line) + ": " + what);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Jinja2 normalizes every line ending to "\n" and drops one trailing newline
// (keep_trailing_newline=False).
std::string normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (std::size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out += '\n';
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out += src[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) out += static_cast<char>(cp);
  else if (cp < 0x800) { out += static_cast<char>(0xc0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3f)); }
  else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // did the previous match end at a line start (for lstrip_blocks)
    while (pos_ < s_.size()) {
      std::size_t open = find_tag(pos_);
      std::string text = s_.substr(pos_, open - pos_);
      const int text_line = line_;
      advance_to(open);
      if (open == s_.size()) { emit_text(text, text_line); break; }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const char mod = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (mod != '+' && kind != '{') {
        lstrip_line(text, line_starting);
      }
      emit_text(text, text_line);
      std::size_t p = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      char end_mod = '\0';
      if (kind == '#') {
        const auto close = s_.find("#}", p);
        if (close == std::string::npos) fail(line_, "unclosed comment '{#'");
        if (close > p && (s_[close - 1] == '-' || s_[close - 1] == '+')) end_mod = s_[close - 1];
        advance_to(close + 2);
      } else if (kind == '%' && is_raw(p)) {
        lex_raw(p, end_mod);
      } else {
        out_.push_back({kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line_});
        advance_to(p);
        end_mod = lex_inside(kind);
      }
      if (end_mod == '-') {
        while (pos_ < s_.size() && is_space(s_[pos_])) advance_to(pos_ + 1);
      } else if (end_mod != '+' && kind != '{' && pos_ < s_.size() && s_[pos_] == '\n') {
        advance_to(pos_ + 1);  // trim_blocks: the first newline after a block tag
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    out_.push_back({Token::Type::Eof, "", line_});
    return std::move(out_);
  }

 private:
  std::size_t find_tag(std::size_t from) const {
    for (std::size_t k = from; k + 1 < s_.size(); ++k)
      if (s_[k] == '{' && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    return s_.size();
  }

  void advance_to(std::size_t p) {
    for (; pos_ < p; ++pos_)
      if (s_[pos_] == '\n') ++line_;
  }

  // lstrip_blocks: spaces and tabs between a line start and a block tag go.
  static void lstrip_line(std::string& text, bool line_starting) {
    const auto nl = text.rfind('\n');
    const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !line_starting) return;
    for (std::size_t k = from; k < text.size(); ++k)
      if (text[k] != ' ' && text[k] != '\t') return;
    text.resize(from);
  }

  void emit_text(const std::string& text, int line) {
    if (!text.empty()) out_.push_back({Token::Type::Text, text, line});
  }

  bool is_raw(std::size_t p) const {
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    return s_.compare(p, 2, "%}") == 0;
  }

  void lex_raw(std::size_t p, char& end_mod) {
    const int start_line = line_;
    const auto open_end = s_.find("%}", p);
    const bool strip_start = s_[open_end - 1] == '-';
    std::size_t body = open_end + 2;
    if (strip_start) while (body < s_.size() && is_space(s_[body])) ++body;
    // Find "{%[-+]? endraw [-+]?%}".
    for (std::size_t k = s_.find("{%", body); k != std::string::npos; k = s_.find("{%", k + 2)) {
      std::size_t q = k + 2;
      const bool strip_before = q < s_.size() && s_[q] == '-';
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ++q;
      while (q < s_.size() && is_space(s_[q])) ++q;
      if (s_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < s_.size() && is_space(s_[q])) ++q;
      char m = '\0';
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) m = s_[q++];
      if (s_.compare(q, 2, "%}") != 0) continue;
      std::string text = s_.substr(body, k - body);
      if (strip_before) while (!text.empty() && is_space(text.back())) text.pop_back();
      emit_text(text, start_line);
      end_mod = m;
      advance_to(q + 2);
      return;
    }
    fail(start_line, "unclosed 'raw' block (missing endraw)");
  }

  // Tokens inside {{ }} or {% %}; returns the end's modifier ('-', '+' or 0).
  char lex_inside(char kind) {
    const int start_line = line_;
    const char* end = kind == '{' ? "}}" : "%}";
    int depth = 0;  // brackets: a '}}' inside a dict literal is not the end
    while (true) {
      while (pos_ < s_.size() && is_space(s_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= s_.size()) fail(start_line, std::string("unclosed '") + (kind == '{' ? "{{" : "{%") + "'");
      const char c = s_[pos_];
      if (depth == 0) {
        for (const char m : {'-', '+'}) {
          if (c == m && s_.compare(pos_ + 1, 2, end) == 0 && (m == '-' || kind == '%')) {
            advance_to(pos_ + 3);
            close(kind);
            return m;
          }
        }
        if (s_.compare(pos_, 2, end) == 0) {
          advance_to(pos_ + 2);
          close(kind);
          return '\0';
        }
      }
      if (is_name_start(c)) {
        std::size_t e = pos_;
        while (e < s_.size() && (is_name_start(s_[e]) || is_digit(s_[e]))) ++e;
        out_.push_back({Token::Type::Name, s_.substr(pos_, e - pos_), line_});
        advance_to(e);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                          "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        const char* found = nullptr;
        for (const char* op : ops)
          if (s_.compare(pos_, std::strlen(op), op) == 0) { found = op; break; }
        if (!found) fail(line_, std::string("unexpected character '") + c + "'");
        if (*found == '(' || *found == '[' || *found == '{') ++depth;
        if ((*found == ')' || *found == ']' || *found == '}') && depth > 0) --depth;
        out_.push_back({Token::Type::Op, found, line_});
        advance_to(pos_ + std::strlen(found));
      }
    }
  }

  void close(char kind) { out_.push_back({kind == '{' ? Token::Type::VarEnd : Token::Type::BlockEnd, "", line_}); }

  void lex_number() {
    std::size_t e = pos_;
    bool is_float = false;
    auto digits = [&] { while (e < s_.size() && (is_digit(s_[e]) || s_[e] == '_')) ++e; };
    digits();
    if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) { is_float = true; ++e; digits(); }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      std::size_t q = e + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && is_digit(s_[q])) { is_float = true; e = q; digits(); }
    }
    std::string text;
    for (std::size_t k = pos_; k < e; ++k)
      if (s_[k] != '_') text += s_[k];
    out_.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line_});
    advance_to(e);
  }

  // Python string escapes, as Jinja2 unescapes its string literals.
  void lex_string(char quote) {
    const int start_line = line_;
    std::string v;
    std::size_t k = pos_ + 1;
    for (;; ++k) {
      if (k >= s_.size()) fail(start_line, "unterminated string literal");
      const char c = s_[k];
      if (c == quote) break;
      if (c != '\\') { v += c; continue; }
      if (++k >= s_.size()) fail(start_line, "unterminated string literal");
      const char e = s_[k];
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case '0': v += '\0'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '\\': case '\'': case '"': v += e; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          unsigned cp = 0;
          for (int m = 1; m <= n; ++m) {
            const int h = k + static_cast<std::size_t>(m) < s_.size() ? hex_value(s_[k + static_cast<std::size_t>(m)]) : -1;
            if (h < 0) fail(start_line, "bad \\" + std::string(1, e) + " escape in string literal");
            cp = cp * 16 + static_cast<unsigned>(h);
          }
          if (cp > 0x10ffff) fail(start_line, "bad \\U escape in string literal");
          append_utf8(v, cp);
          k += static_cast<std::size_t>(n);
          break;
        }
        default: v += '\\'; v += e; break;
      }
    }
    out_.push_back({Token::Type::String, v, start_line});
    advance_to(k + 1);
  }

  std::string s_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize(source)).run(); }

}  // namespace fp8lm::chat
