// Grammar IR builders, validation and printing.
#include "grammar/grammar.h"

#include <bit>

#include "common/error.h"

namespace deepinfer::grammar {

void ByteSet::set_range(std::uint8_t lo, std::uint8_t hi) {
  for (int b = lo; b <= hi; ++b) set(static_cast<std::uint8_t>(b));
}

bool ByteSet::subset_of(const ByteSet& other) const {
  for (int i = 0; i < 4; ++i) {
    if (words_[i] & ~other.words_[i]) return false;
  }
  return true;
}

int ByteSet::count() const {
  int n = 0;
  for (auto w : words_) n += std::popcount(w);
  return n;
}

ByteSet& ByteSet::operator|=(const ByteSet& other) {
  for (int i = 0; i < 4; ++i) words_[i] |= other.words_[i];
  return *this;
}

ExprId Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::empty() { return add(Expr{ExprKind::kEmpty, 0, 0, {}}); }

ExprId Grammar::bytes(const ByteSet& set) {
  byte_sets_.push_back(set);
  return add(Expr{ExprKind::kBytes, static_cast<std::int32_t>(byte_sets_.size() - 1), 0, {}});
}

ExprId Grammar::byte(std::uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

ExprId Grammar::literal(std::string_view text) {
  std::vector<ExprId> parts;
  parts.reserve(text.size());
  for (char c : text) parts.push_back(byte(static_cast<std::uint8_t>(c)));
  return seq(std::move(parts));
}

ExprId Grammar::seq(std::vector<ExprId> parts) {
  std::vector<ExprId> flat;
  for (ExprId p : parts) {
    const Expr& e = exprs_[p];
    if (e.kind == ExprKind::kEmpty) continue;
    if (e.kind == ExprKind::kSeq) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(p);
    }
  }
  if (flat.empty()) return empty();
  if (flat.size() == 1) return flat[0];
  return add(Expr{ExprKind::kSeq, 0, 0, std::move(flat)});
}

ExprId Grammar::alt(std::vector<ExprId> options) {
  DI_CHECK(!options.empty(), "grammar: an alternation needs at least one option");
  std::vector<ExprId> flat;
  for (ExprId o : options) {
    const Expr& e = exprs_[o];
    if (e.kind == ExprKind::kAlt) {
      flat.insert(flat.end(), e.children.begin(), e.children.end());
    } else {
      flat.push_back(o);
    }
  }
  if (flat.size() == 1) return flat[0];
  return add(Expr{ExprKind::kAlt, 0, 0, std::move(flat)});
}

ExprId Grammar::repeat(ExprId item, int min, int max) {
  DI_CHECK(min >= 0 && (max == kUnbounded || max >= min),
           "grammar: invalid repetition bounds {{{},{}}}", min, max);
  if (min == 1 && max == 1) return item;
  if (max == 0) return empty();
  return add(Expr{ExprKind::kRepeat, min, max, {item}});
}

ExprId Grammar::ref(RuleId rule) { return add(Expr{ExprKind::kRef, rule, 0, {}}); }

RuleId Grammar::add_rule(std::string name) {
  DI_CHECK(!rule_index_.contains(name), "grammar: rule '{}' is defined twice", name);
  auto id = static_cast<RuleId>(rules_.size());
  rule_index_.emplace(name, id);
  rules_.push_back(Rule{std::move(name), -1});
  return id;
}

RuleId Grammar::add_unique_rule(std::string_view hint) {
  std::string name(hint);
  for (int i = 1; rule_index_.contains(name); ++i) name = fmt::format("{}_{}", hint, i);
  return add_rule(std::move(name));
}

void Grammar::set_body(RuleId rule, ExprId body) { rules_[rule].body = body; }

RuleId Grammar::find_rule(std::string_view name) const {
  auto it = rule_index_.find(std::string(name));
  return it == rule_index_.end() ? -1 : it->second;
}

RuleId Grammar::import_grammar(const Grammar& other, std::string_view prefix) {
  other.validate();
  const auto set_offset = static_cast<std::int32_t>(byte_sets_.size());
  const auto expr_offset = static_cast<ExprId>(exprs_.size());
  byte_sets_.insert(byte_sets_.end(), other.byte_sets_.begin(), other.byte_sets_.end());
  std::vector<RuleId> rule_map;
  for (const Rule& r : other.rules_) rule_map.push_back(add_unique_rule(fmt::format("{}{}", prefix, r.name)));
  for (Expr e : other.exprs_) {
    if (e.kind == ExprKind::kBytes) e.a += set_offset;
    if (e.kind == ExprKind::kRef) e.a = rule_map[e.a];
    for (ExprId& c : e.children) c += expr_offset;
    exprs_.push_back(std::move(e));
  }
  for (std::size_t i = 0; i < other.rules_.size(); ++i) set_body(rule_map[i], other.rules_[i].body + expr_offset);
  return rule_map[other.root_];
}

void Grammar::validate() const {
  DI_CHECK(root_ >= 0 && root_ < num_rules(), "grammar: no root rule");
  for (const Rule& r : rules_) {
    DI_CHECK(r.body >= 0, "grammar: rule '{}' is referenced but never defined", r.name);
  }
}

namespace {

void append_byte(std::string& out, std::uint8_t b, bool in_class) {
  if (b == '\\' || b == '"' || (in_class && (b == ']' || b == '-' || b == '^'))) {
    out += '\\';
    out += static_cast<char>(b);
  } else if (b == '\n') {
    out += "\\n";
  } else if (b == '\t') {
    out += "\\t";
  } else if (b == '\r') {
    out += "\\r";
  } else if (b < 0x20 || b >= 0x7f) {
    out += fmt::format("\\x{:02X}", b);
  } else {
    out += static_cast<char>(b);
  }
}

std::string byte_set_to_string(const ByteSet& s) {
  if (s.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (s.test(static_cast<std::uint8_t>(b))) {
        std::string out = "\"";
        append_byte(out, static_cast<std::uint8_t>(b), false);
        return out + "\"";
      }
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.test(static_cast<std::uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.test(static_cast<std::uint8_t>(e + 1))) ++e;
    append_byte(out, static_cast<std::uint8_t>(b), true);
    if (e > b) {
      out += '-';
      append_byte(out, static_cast<std::uint8_t>(e), true);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::expr_to_string(ExprId id) const {
  const Expr& e = exprs_[id];
  switch (e.kind) {
    case ExprKind::kEmpty:
      return "\"\"";
    case ExprKind::kBytes:
      return byte_set_to_string(byte_sets_[e.a]);
    case ExprKind::kRef:
      return rules_[e.a].name;
    case ExprKind::kSeq:
    case ExprKind::kAlt: {
      std::string out = "(";
      for (std::size_t i = 0; i < e.children.size(); ++i) {
        if (i) out += e.kind == ExprKind::kSeq ? " " : " | ";
        out += expr_to_string(e.children[i]);
      }
      return out + ")";
    }
    case ExprKind::kRepeat: {
      std::string inner = expr_to_string(e.children[0]);
      if (e.a == 0 && e.b == 1) return inner + "?";
      if (e.a == 0 && e.b == kUnbounded) return inner + "*";
      if (e.a == 1 && e.b == kUnbounded) return inner + "+";
      if (e.b == kUnbounded) return fmt::format("{}{{{},}}", inner, e.a);
      return fmt::format("{}{{{},{}}}", inner, e.a, e.b);
    }
  }
  return "";
}

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules_) {
    out += r.name + " ::= " + (r.body >= 0 ? expr_to_string(r.body) : "<undefined>") + "\n";
  }
  return out;
}

}  // namespace deepinfer::grammar
