// Recursive-descent parser for Python-style regular expressions, emitting grammar IR directly.
#include "grammar/regex.h"

#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/unicode.h"

namespace deepinfer::grammar {
namespace {

constexpr int kMaxRepeat = 10000;
constexpr int kMaxDepth = 200;

CodepointSet ascii_digits() { return CodepointSet::range('0', '9'); }
CodepointSet ascii_word() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}
CodepointSet ascii_space() {
  CodepointSet s = CodepointSet::range('\t', '\r');  // \t \n \v \f \r
  s.add(' ', ' ');
  return s;
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view pattern, const RegexOptions& options)
      : g_(g), pattern_(pattern), options_(options) {
    std::size_t pos = 0;
    while (pos < pattern.size()) {
      std::uint32_t cp = 0;
      if (!decode_utf8(pattern, pos, cp)) fail("invalid UTF-8");
      cps_.push_back(cp);
    }
  }

  ExprId parse() {
    ExprId e = parse_alternation(0);
    if (pos_ < cps_.size()) fail(cps_[pos_] == ')' ? "unbalanced parenthesis" : "unexpected character");
    return e;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    std::string shown(pattern_.substr(0, 200));
    if (pattern_.size() > 200) shown += "...";
    throw_error("{}: {} at offset {} in '{}'", options_.context, what, pos_, shown);
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  std::uint32_t peek(std::size_t ahead = 0) const {
    return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : 0xFFFFFFFF;
  }
  bool eat(std::uint32_t c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }

  ExprId parse_alternation(int depth) {
    if (depth > kMaxDepth) fail("groups nested too deeply");
    std::vector<ExprId> options{parse_sequence(depth)};
    while (eat('|')) options.push_back(parse_sequence(depth));
    return g_.alt(std::move(options));
  }

  ExprId parse_sequence(int depth) {
    std::vector<ExprId> parts;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        // A full match makes a leading anchor a no-op; elsewhere it could never match.
        if (!parts.empty()) fail("'^' not at the start");
        ++pos_;
        continue;
      }
      if (peek() == '$') {
        ++pos_;
        if (!at_end() && peek() != '|' && peek() != ')') fail("'$' not at the end");
        continue;
      }
      ExprId atom = parse_atom(depth);
      parts.push_back(parse_quantifiers(atom));
    }
    return g_.seq(std::move(parts));
  }

  // Parses {m}, {m,}, {m,n}, {,n}; returns false (position unchanged) when '{' is a literal.
  bool parse_braces(int& lo, int& hi) {
    std::size_t save = pos_;
    if (!eat('{')) return false;
    auto number = [&](int& out) {
      std::size_t start = pos_;
      long long v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + (peek() - '0');
        if (v > kMaxRepeat) fail(fmt::format("repetition count above {}", kMaxRepeat));
        ++pos_;
      }
      out = static_cast<int>(v);
      return pos_ > start;
    };
    bool has_lo = number(lo);
    if (!has_lo) lo = 0;
    if (eat('}')) {
      if (!has_lo) {
        pos_ = save;
        return false;
      }
      hi = lo;
      return true;
    }
    if (!eat(',')) {
      pos_ = save;
      return false;
    }
    bool has_hi = number(hi);
    if (!has_hi) hi = kUnbounded;
    if (!eat('}')) {
      pos_ = save;
      return false;
    }
    if (has_hi && hi < lo) fail("min repeat greater than max repeat");
    return true;
  }

  ExprId parse_quantifiers(ExprId atom) {
    bool quantified = false;
    while (!at_end()) {
      int lo = 0;
      int hi = 0;
      std::uint32_t c = peek();
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : kUnbounded;
      } else if (c == '{') {
        if (!parse_braces(lo, hi)) break;
      } else {
        break;
      }
      if (quantified) fail("multiple repeat");
      quantified = true;
      if (peek() == '+') fail("possessive quantifiers are not supported");
      eat('?');  // lazy: same language under a full match
      atom = g_.repeat(atom, lo, hi);
    }
    return atom;
  }

  ExprId parse_group(int depth) {
    if (eat('?')) {
      if (eat(':')) {
      } else if (peek() == 'P' && peek(1) == '<') {
        pos_ += 2;
        skip_group_name();
      } else if (peek() == '<' && peek(1) != '=' && peek(1) != '!') {
        ++pos_;
        skip_group_name();
      } else if (peek() == '#') {
        while (!at_end() && peek() != ')') ++pos_;
        if (!eat(')')) fail("missing ), unterminated comment");
        return g_.empty();
      } else if (peek() == '=' || peek() == '!' || peek() == '<') {
        fail("lookaround assertions are not supported");
      } else if (peek() == 'P' && peek(1) == '=') {
        fail("backreferences are not supported");
      } else {
        fail("inline flags and conditional groups are not supported");
      }
    }
    ExprId inner = parse_alternation(depth + 1);
    if (!eat(')')) fail("missing ), unterminated subpattern");
    return inner;
  }

  void skip_group_name() {
    std::size_t start = pos_;
    while (!at_end() && peek() != '>') ++pos_;
    if (!eat('>') || pos_ - 1 == start) fail("bad group name");
  }

  ExprId parse_atom(int depth) {
    std::uint32_t c = peek();
    ++pos_;
    switch (c) {
      case '(':
        return parse_group(depth);
      case '[':
        return set_expr(parse_class());
      case '.':
        return set_expr(CodepointSet::all().minus(CodepointSet::single('\n')));
      case '\\':
        return parse_escape_atom();
      case '*':
      case '+':
      case '?':
        --pos_;
        fail("nothing to repeat");
      default:
        if (c == '{') {
          --pos_;
          int lo = 0;
          int hi = 0;
          if (parse_braces(lo, hi)) fail("nothing to repeat");
          ++pos_;
        }
        return set_expr(CodepointSet::single(c));
    }
  }

  ExprId parse_escape_atom() {
    if (at_end()) fail("bad escape (end of pattern)");
    std::uint32_t c = peek();
    if (c == 'b' || c == 'B') fail("word boundaries are not supported");
    if (c == 'A' || c == 'Z') {
      // \A and \Z are anchors, no-ops under a full match when at the ends.
      ++pos_;
      return g_.empty();
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    return set_expr(parse_escape(false));
  }

  // One escape (after the backslash) as a code point set; in_class changes the meaning of \b.
  CodepointSet parse_escape(bool in_class) {
    if (at_end()) fail("bad escape (end of pattern)");
    std::uint32_t c = peek();
    ++pos_;
    switch (c) {
      case 'd': return ascii_digits();
      case 'D': return ascii_digits().complement();
      case 'w': return ascii_word();
      case 'W': return ascii_word().complement();
      case 's': return ascii_space();
      case 'S': return ascii_space().complement();
      case 'n': return CodepointSet::single('\n');
      case 't': return CodepointSet::single('\t');
      case 'r': return CodepointSet::single('\r');
      case 'f': return CodepointSet::single('\f');
      case 'v': return CodepointSet::single('\v');
      case 'a': return CodepointSet::single('\a');
      case 'x': return CodepointSet::single(parse_hex(2));
      case 'u': return CodepointSet::single(parse_hex(4));
      case 'U': return CodepointSet::single(parse_hex(8));
      case '0': {
        std::uint32_t v = 0;
        for (int i = 0; i < 2 && peek() >= '0' && peek() <= '7'; ++i) v = v * 8 + (cps_[pos_++] - '0');
        return CodepointSet::single(v);
      }
      case 'b':
        if (in_class) return CodepointSet::single('\b');
        break;
      default:
        break;
    }
    if (c < 0x80 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
      --pos_;
      fail(fmt::format("bad or unsupported escape \\{}", static_cast<char>(c)));
    }
    return CodepointSet::single(c);
  }

  std::uint32_t parse_hex(int digits) {
    std::uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      std::uint32_t c = peek();
      int d = (c >= '0' && c <= '9') ? static_cast<int>(c - '0')
              : (c >= 'a' && c <= 'f') ? static_cast<int>(c - 'a' + 10)
              : (c >= 'A' && c <= 'F') ? static_cast<int>(c - 'A' + 10) : -1;
      if (d < 0) fail("incomplete hex escape");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodepoint) fail("code point out of range");
    return v;
  }

  CodepointSet parse_class() {
    bool negate = eat('^');
    CodepointSet set;
    bool first = true;
    while (true) {
      if (at_end()) fail("unterminated character set");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      CodepointSet item = class_item();
      bool single = item.ranges().size() == 1 && item.ranges()[0].lo == item.ranges()[0].hi;
      if (single && peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
        ++pos_;
        CodepointSet upper = class_item();
        if (upper.ranges().size() != 1 || upper.ranges()[0].lo != upper.ranges()[0].hi) {
          fail("bad character range");
        }
        std::uint32_t lo = item.ranges()[0].lo;
        std::uint32_t hi = upper.ranges()[0].lo;
        if (hi < lo) fail("bad character range (reversed)");
        set.add(lo, hi);
      } else {
        set.add(item);
      }
    }
    return negate ? set.complement() : set;
  }

  CodepointSet class_item() {
    std::uint32_t c = peek();
    ++pos_;
    if (c == '\\') return parse_escape(true);
    return CodepointSet::single(c);
  }

  // The code points of set as an expression; in JSON-string mode the characters JSON must escape
  // become their escape sequences.
  ExprId set_expr(const CodepointSet& set) {
    if (!options_.json_string) return codepoints_to_expr(g_, set);
    CodepointSet special = CodepointSet::range(0, 0x1F);
    special.add('"', '"');
    special.add('\\', '\\');
    std::vector<ExprId> options;
    CodepointSet safe = set.minus(special);
    if (!safe.empty()) options.push_back(codepoints_to_expr(g_, safe));
    CodepointSet escaped = set.minus(safe);
    for (const auto& r : escaped.ranges()) {
      for (std::uint32_t cp = r.lo; cp <= r.hi; ++cp) options.push_back(g_.literal(json_escape(cp)));
    }
    if (options.empty()) return codepoints_to_expr(g_, CodepointSet{});
    return g_.alt(std::move(options));
  }

  static std::string json_escape(std::uint32_t cp) {
    switch (cp) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\t': return "\\t";
      case '\r': return "\\r";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default: return fmt::format("\\u{:04x}", cp);
    }
  }

  Grammar& g_;
  std::string_view pattern_;
  const RegexOptions& options_;
  std::vector<std::uint32_t> cps_;
  std::size_t pos_ = 0;
};

}  // namespace

ExprId regex_to_expr(Grammar& g, std::string_view pattern, const RegexOptions& options) {
  return RegexParser(g, pattern, options).parse();
}

Grammar grammar_from_regex(std::string_view pattern) {
  Grammar g;
  RuleId root = g.add_rule("root");
  g.set_body(root, regex_to_expr(g, pattern));
  g.set_root(root);
  return g;
}

}  // namespace deepinfer::grammar
