// JSON scalar grammars: string characters and escapes, formats, keys that avoid declared names,
// and exact decimal ranges for bounded integers and numbers.
#include "grammar/json_values.h"

#include <cmath>
#include <functional>
#include <map>

#include "common/error.h"
#include "grammar/regex.h"
#include "grammar/unicode.h"

namespace deepinfer::grammar {
namespace {

CodepointSet plain_chars() {
  CodepointSet special = CodepointSet::range(0, 0x1F);
  special.add('"', '"');
  special.add('\\', '\\');
  return CodepointSet::all().minus(special);
}

ExprId digit_range(Grammar& g, char lo, char hi) {
  ByteSet s;
  s.set_range(static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi));
  return g.bytes(s);
}

ExprId any_digits(Grammar& g, int n) { return g.repeat(digit_range(g, '0', '9'), n, n); }

// Digit strings d with lo <= d <= hi, all three of the same length.
ExprId same_length_range(Grammar& g, const std::string& lo, const std::string& hi) {
  std::size_t n = lo.size();
  if (n == 0) return g.empty();
  if (n == 1) return digit_range(g, lo[0], hi[0]);
  std::string rest_lo = lo.substr(1);
  std::string rest_hi = hi.substr(1);
  if (lo[0] == hi[0]) return g.seq({g.byte(static_cast<std::uint8_t>(lo[0])), same_length_range(g, rest_lo, rest_hi)});
  if (rest_lo == std::string(n - 1, '0') && rest_hi == std::string(n - 1, '9')) {
    return g.seq({digit_range(g, lo[0], hi[0]), any_digits(g, static_cast<int>(n - 1))});
  }
  std::vector<ExprId> options;
  options.push_back(g.seq({g.byte(static_cast<std::uint8_t>(lo[0])), same_length_range(g, rest_lo, std::string(n - 1, '9'))}));
  if (lo[0] + 1 <= hi[0] - 1) {
    options.push_back(g.seq({digit_range(g, static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)),
                             any_digits(g, static_cast<int>(n - 1))}));
  }
  options.push_back(g.seq({g.byte(static_cast<std::uint8_t>(hi[0])), same_length_range(g, std::string(n - 1, '0'), rest_hi)}));
  return g.alt(std::move(options));
}

// Canonical decimal numerals (no leading zeros) of the integers in [lo, hi], lo >= 0.
ExprId nonnegative_range(Grammar& g, long long lo, std::optional<long long> hi) {
  std::string a = std::to_string(lo);
  std::vector<ExprId> options;
  std::size_t max_len = hi ? std::to_string(*hi).size() : a.size();
  for (std::size_t len = a.size(); len <= max_len; ++len) {
    std::string from = len == a.size() ? a : "1" + std::string(len - 1, '0');
    std::string to = (hi && len == max_len) ? std::to_string(*hi) : std::string(len, '9');
    options.push_back(same_length_range(g, from, to));
  }
  if (!hi) {
    options.push_back(g.seq({digit_range(g, '1', '9'), g.repeat(digit_range(g, '0', '9'), static_cast<int>(a.size()), kUnbounded)}));
  }
  return g.alt(std::move(options));
}

ExprId fraction(Grammar& g) { return g.optional(g.seq({g.byte('.'), g.repeat(digit_range(g, '0', '9'), 1, kUnbounded)})); }
ExprId zero_fraction(Grammar& g) { return g.optional(g.seq({g.byte('.'), g.repeat(g.byte('0'), 1, kUnbounded)})); }
ExprId nonzero_fraction(Grammar& g) {
  ExprId digits = digit_range(g, '0', '9');
  return g.seq({g.byte('.'), g.star(digits), digit_range(g, '1', '9'), g.star(digit_range(g, '0', '9'))});
}

// Magnitudes m = I.F with integer bounds lo <= m <= hi (strict when exclusive); lo >= 0.
ExprId magnitude(Grammar& g, long long lo, bool lo_ex, std::optional<long long> hi, bool hi_ex) {
  std::vector<ExprId> options;
  if (hi && (*hi < lo || (*hi == lo && (lo_ex || hi_ex)))) return g.bytes(ByteSet{});
  ExprId at_lo = g.literal(std::to_string(lo));
  if (hi && *hi == lo) return g.seq({at_lo, zero_fraction(g)});
  options.push_back(g.seq({at_lo, lo_ex ? nonzero_fraction(g) : fraction(g)}));
  std::optional<long long> inner_hi;
  if (hi) inner_hi = *hi - 1;
  if (!hi || *hi - 1 >= lo + 1) options.push_back(g.seq({nonnegative_range(g, lo + 1, inner_hi), fraction(g)}));
  if (hi && !hi_ex) options.push_back(g.seq({g.literal(std::to_string(*hi)), zero_fraction(g)}));
  return g.alt(std::move(options));
}

}  // namespace

ExprId json_char(Grammar& g) {
  ExprId hex = g.bytes([] {
    ByteSet s;
    s.set_range('0', '9');
    s.set_range('a', 'f');
    s.set_range('A', 'F');
    return s;
  }());
  // \u escapes exclude surrogates, so every escape is one character of the decoded value.
  ByteSet not_d;
  not_d.set_range('0', '9');
  not_d.set_range('a', 'c');
  not_d.set_range('A', 'C');
  not_d.set_range('e', 'f');
  not_d.set_range('E', 'F');
  ByteSet d;
  d.set('d');
  d.set('D');
  ExprId unicode_escape = g.seq({g.literal("\\u"),
                                 g.alt({g.seq({g.bytes(not_d), g.repeat(hex, 3, 3)}),
                                        g.seq({g.bytes(d), digit_range(g, '0', '7'), g.repeat(hex, 2, 2)})})});
  ByteSet simple;
  for (char c : std::string_view("\"\\/bfnrt")) simple.set(static_cast<std::uint8_t>(c));
  return g.alt({codepoints_to_expr(g, plain_chars()), g.seq({g.byte('\\'), g.bytes(simple)}), unicode_escape});
}

ExprId json_string(Grammar& g, int min_length, int max_length) {
  return g.seq({g.byte('"'), g.repeat(json_char(g), min_length, max_length), g.byte('"')});
}

ExprId json_string_pattern(Grammar& g, std::string_view pattern, std::string_view path) {
  std::string context = fmt::format("pattern at {}", path);
  RegexOptions options{true, context};
  return g.seq({g.byte('"'), regex_to_expr(g, pattern, options), g.byte('"')});
}

ExprId json_string_format(Grammar& g, std::string_view format, std::string_view path) {
  static const std::string kDate =
      R"(\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8])))";
  static const std::string kTime = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::map<std::string, std::string, std::less<>> kFormats = {
      {"date", kDate},
      {"time", kTime},
      {"date-time", kDate + "T" + kTime},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
      {"email", R"([a-zA-Z0-9_+\-]+(\.[a-zA-Z0-9_+\-]+)*@[a-zA-Z0-9]([a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?)+)"},
      {"hostname", R"([a-zA-Z0-9]([a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?)*)"},
      {"uri", R"([a-zA-Z][a-zA-Z0-9+.\-]*:[^\s<>"{}|\\^`]+)"},
  };
  auto it = kFormats.find(format);
  if (it == kFormats.end()) {
    throw_error("json schema: unsupported string format '{}' at {} (supported: date, time, date-time, uuid, ipv4, "
                "email, hostname, uri)", format, path);
  }
  return json_string_pattern(g, it->second, path);
}

ExprId json_key_excluding(Grammar& g, const std::vector<std::string>& excluded) {
  struct Node {
    std::map<std::uint32_t, int> children;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : excluded) {
    int cur = 0;
    std::size_t pos = 0;
    std::uint32_t cp = 0;
    while (pos < name.size()) {
      if (!decode_utf8(name, pos, cp)) throw_error("json schema: property name is not valid UTF-8");
      auto it = trie[cur].children.find(cp);
      if (it == trie[cur].children.end()) {
        trie.push_back(Node{});
        it = trie[cur].children.emplace(cp, static_cast<int>(trie.size() - 1)).first;
      }
      cur = it->second;
    }
    trie[cur].terminal = true;
  }
  CodepointSet plain = plain_chars();
  ExprId rest = g.seq({g.star(codepoints_to_expr(g, plain)), g.byte('"')});
  std::function<ExprId(int)> build = [&](int n) {
    std::vector<ExprId> options;
    if (!trie[n].terminal) options.push_back(g.byte('"'));
    CodepointSet others = plain;
    for (const auto& [cp, child] : trie[n].children) {
      others = others.minus(CodepointSet::single(cp));
      std::string bytes;
      append_utf8(bytes, cp);
      if (plain.contains(cp)) options.push_back(g.seq({g.literal(bytes), build(child)}));
    }
    options.push_back(g.seq({codepoints_to_expr(g, others), rest}));
    return g.alt(std::move(options));
  };
  return g.seq({g.byte('"'), build(0)});
}

ExprId json_integer(Grammar& g, std::optional<long long> lo, std::optional<long long> hi) {
  if (lo && hi && *lo > *hi) return g.bytes(ByteSet{});
  std::vector<ExprId> options;
  if (!hi || *hi >= 0) options.push_back(nonnegative_range(g, lo ? std::max(*lo, 0LL) : 0, hi));
  if (!lo || *lo < 0) {
    // Negative values -m with m in [max(1, -hi), -lo].
    long long m_lo = hi && *hi < 0 ? -*hi : 1;
    std::optional<long long> m_hi;
    if (lo) m_hi = -*lo;
    options.push_back(g.seq({g.byte('-'), nonnegative_range(g, m_lo, m_hi)}));
  }
  return g.alt(std::move(options));
}

ExprId json_number(Grammar& g, std::optional<double> lo, bool lo_ex, std::optional<double> hi, bool hi_ex,
                   std::string_view path) {
  if (!lo && !hi) {
    ExprId digits = g.repeat(digit_range(g, '0', '9'), 1, kUnbounded);
    ByteSet e;
    e.set('e');
    e.set('E');
    ByteSet sign;
    sign.set('+');
    sign.set('-');
    ExprId exponent = g.optional(g.seq({g.bytes(e), g.optional(g.bytes(sign)), digits}));
    return g.seq({g.optional(g.byte('-')), nonnegative_range(g, 0, std::nullopt), fraction(g), exponent});
  }
  for (auto bound : {lo, hi}) {
    if (bound && (std::floor(*bound) != *bound || std::fabs(*bound) > 1e15)) {
      throw_error("json schema: {}: a non-integer bound ({}) on a number is not supported", path, *bound);
    }
  }
  std::optional<long long> l;
  std::optional<long long> h;
  if (lo) l = static_cast<long long>(*lo);
  if (hi) h = static_cast<long long>(*hi);
  std::vector<ExprId> options;
  if (!h || *h >= 0) {
    bool at_zero = !l || *l < 0;
    options.push_back(magnitude(g, at_zero ? 0 : *l, at_zero ? false : lo_ex, h, hi_ex));
  }
  if (!l || *l < 0) {
    // x = -m with m > 0, -hi <= m <= -lo.
    bool at_zero = !h || *h >= 0;
    std::optional<long long> m_hi;
    if (l) m_hi = -*l;
    options.push_back(g.seq({g.byte('-'), magnitude(g, at_zero ? 0 : -*h, at_zero ? true : hi_ex, m_hi, lo_ex)}));
  }
  return g.alt(std::move(options));
}

}  // namespace deepinfer::grammar
