// Parser for GBNF-style EBNF into the grammar IR, plus direct-left-recursion removal.
#include "grammar/ebnf.h"

#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/unicode.h"

namespace deepinfer::grammar {
namespace {

constexpr int kMaxDepth = 200;
constexpr int kMaxRepeat = 10000;

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

class EbnfParser {
 public:
  EbnfParser(std::string_view text) : text_(text) {}

  Grammar parse(std::string_view root_name) {
    skip_space();
    while (pos_ < text_.size()) {
      std::size_t name_pos = pos_;
      std::string name = parse_name();
      skip_space();
      if (!eat("::=")) fail("expected '::=' after rule name '" + name + "'");
      RuleId r = rule_for(name, name_pos);
      if (defined_[r]) fail_at(name_pos, "rule '" + name + "' is defined twice");
      defined_[r] = true;
      g_.set_body(r, parse_alternation(0));
      skip_space();
      if (peek() == '(' && peek(1) == '=') fail("lookahead assertions are not supported");
    }
    for (RuleId r = 0; r < g_.num_rules(); ++r) {
      if (!defined_[r]) fail_at(first_use_[r], "rule '" + g_.rule_name(r) + "' is not defined");
    }
    RuleId root = g_.find_rule(root_name);
    DI_CHECK(root >= 0, "ebnf: the grammar has no '{}' rule", root_name);
    g_.set_root(root);
    for (RuleId r = 0; r < g_.num_rules(); ++r) remove_direct_left_recursion(r);
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    int line = 1;
    int col = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw_error("ebnf: line {} column {}: {}", line, col, what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  char peek(std::size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  bool eat(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    if (!is_name_start(peek())) fail("expected a rule name");
    std::size_t start = pos_;
    while (is_name_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  RuleId rule_for(const std::string& name, std::size_t at) {
    RuleId r = g_.find_rule(name);
    if (r < 0) {
      r = g_.add_rule(name);
      defined_.push_back(false);
      first_use_.push_back(at);
    }
    return r;
  }

  // A new rule starts where a name is followed by '::='.
  bool at_rule_start() {
    std::size_t save = pos_;
    if (!is_name_start(peek())) return false;
    while (is_name_char(peek())) ++pos_;
    skip_space();
    bool result = text_.substr(pos_, 3) == "::=";
    pos_ = save;
    return result;
  }

  ExprId parse_alternation(int depth) {
    if (depth > kMaxDepth) fail("groups nested too deeply");
    std::vector<ExprId> options{parse_sequence(depth)};
    while (true) {
      skip_space();
      if (!eat("|")) break;
      options.push_back(parse_sequence(depth));
    }
    return g_.alt(std::move(options));
  }

  ExprId parse_sequence(int depth) {
    std::vector<ExprId> parts;
    while (true) {
      skip_space();
      char c = peek();
      if (c == '\0' || c == '|' || c == ')' || (c == '(' && peek(1) == '=')) break;
      if (at_rule_start()) break;
      parts.push_back(parse_quantified(parse_primary(depth)));
    }
    return g_.seq(std::move(parts));
  }

  ExprId parse_primary(int depth) {
    char c = peek();
    if (c == '"' || c == '\'') return parse_string();
    if (c == '[') return codepoints_to_expr(g_, parse_class());
    if (c == '.') {
      ++pos_;
      return codepoints_to_expr(g_, CodepointSet::all());
    }
    if (c == '(') {
      ++pos_;
      ExprId inner = parse_alternation(depth + 1);
      skip_space();
      if (!eat(")")) fail("expected ')'");
      return inner;
    }
    if (is_name_start(c)) {
      std::size_t at = pos_;
      std::string name = parse_name();
      if (peek() == '(') fail("macros such as '" + name + "(...)' are not supported");
      return g_.ref(rule_for(name, at));
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  ExprId parse_quantified(ExprId e) {
    while (true) {
      char c = peek();
      if (c == '*') {
        ++pos_;
        e = g_.star(e);
      } else if (c == '+') {
        ++pos_;
        e = g_.repeat(e, 1, kUnbounded);
      } else if (c == '?') {
        ++pos_;
        e = g_.optional(e);
      } else if (c == '{') {
        ++pos_;
        skip_space();
        int lo = peek() == ',' ? 0 : parse_int();
        int hi = lo;
        skip_space();
        if (eat(",")) {
          skip_space();
          hi = peek() == '}' ? kUnbounded : parse_int();
        }
        skip_space();
        if (!eat("}")) fail("expected '}' closing a repetition");
        if (hi != kUnbounded && hi < lo) fail("repetition maximum below minimum");
        e = g_.repeat(e, lo, hi);
      } else {
        return e;
      }
    }
  }

  int parse_int() {
    if (!(peek() >= '0' && peek() <= '9')) fail("expected a number");
    long long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail("repetition count above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    return static_cast<int>(v);
  }

  std::uint32_t parse_char(bool in_class) {
    if (pos_ >= text_.size()) fail("unterminated string or class");
    if (text_[pos_] != '\\') {
      std::uint32_t cp = 0;
      if (!decode_utf8(text_, pos_, cp)) fail("invalid UTF-8");
      return cp;
    }
    ++pos_;
    char c = peek();
    ++pos_;
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case 'b': return '\b';
      case 'a': return '\a';
      case '0': return 0;
      case 'e': return 0x1B;
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '/': case '-': case '^':
        return static_cast<std::uint8_t>(c);
      default:
        if (in_class && c != '\0') return static_cast<std::uint8_t>(c);
        --pos_;
        fail(std::string("unknown escape '\\") + c + "'");
    }
  }

  std::uint32_t parse_hex(int digits) {
    std::uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) fail("escape is not a Unicode scalar value");
    return v;
  }

  ExprId parse_string() {
    char quote = text_[pos_++];
    std::vector<ExprId> parts;
    std::string bytes;
    while (peek() != quote) {
      if (pos_ >= text_.size() || peek() == '\n') fail("unterminated string");
      append_utf8(bytes, parse_char(false));
    }
    ++pos_;
    return g_.literal(bytes);
  }

  CodepointSet parse_class() {
    ++pos_;  // [
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointSet set;
    while (peek() != ']') {
      if (pos_ >= text_.size()) fail("unterminated character class");
      std::uint32_t lo = parse_char(true);
      std::uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        ++pos_;
        hi = parse_char(true);
        if (hi < lo) fail("reversed range in character class");
      }
      set.add(lo, hi);
    }
    ++pos_;
    return negate ? set.complement() : set;
  }

  // A ::= A x | A y | z  becomes  A ::= z (x | y)*.
  void remove_direct_left_recursion(RuleId r) {
    ExprId body = g_.rule_body(r);
    const Expr& e = g_.expr(body);
    std::vector<ExprId> options = e.kind == ExprKind::kAlt ? e.children : std::vector<ExprId>{body};
    std::vector<ExprId> tails;
    std::vector<ExprId> bases;
    for (ExprId o : options) {
      const Expr& oe = g_.expr(o);
      if (oe.kind == ExprKind::kRef && oe.a == r) continue;  // A ::= A | ... adds nothing
      if (oe.kind == ExprKind::kSeq && g_.expr(oe.children[0]).kind == ExprKind::kRef &&
          g_.expr(oe.children[0]).a == r) {
        tails.push_back(g_.seq(std::vector<ExprId>(oe.children.begin() + 1, oe.children.end())));
      } else {
        bases.push_back(o);
      }
    }
    if (tails.empty() && bases.size() == options.size()) return;
    DI_CHECK(!bases.empty(), "ebnf: rule '{}' is left recursive with no non-recursive alternative", g_.rule_name(r));
    ExprId base = g_.alt(bases);
    g_.set_body(r, tails.empty() ? base : g_.seq({base, g_.star(g_.alt(tails))}));
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  Grammar g_;
  std::vector<bool> defined_;
  std::vector<std::size_t> first_use_;
};

}  // namespace

Grammar grammar_from_ebnf(std::string_view text, std::string_view root_rule) {
  return EbnfParser(text).parse(root_rule);
}

}  // namespace deepinfer::grammar
