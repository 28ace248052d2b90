// The grammar IR every constraint compiles to: named rules whose bodies are expressions over byte
// sets (sequence, alternation, bounded repetition, rule reference). Unicode is already lowered to
// UTF-8 byte sequences here, so the matcher works on bytes, like the tokens it masks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::grammar {

// A set of byte values, 256 bits.
class ByteSet {
 public:
  void set(std::uint8_t b) { words_[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void set_range(std::uint8_t lo, std::uint8_t hi);
  bool test(std::uint8_t b) const { return (words_[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
  bool subset_of(const ByteSet& other) const;
  int count() const;
  ByteSet& operator|=(const ByteSet& other);
  bool operator==(const ByteSet& other) const = default;
  const std::array<std::uint64_t, 4>& words() const { return words_; }

 private:
  std::array<std::uint64_t, 4> words_{};
};

enum class ExprKind : std::uint8_t { kEmpty, kBytes, kSeq, kAlt, kRepeat, kRef };
using ExprId = std::int32_t;
using RuleId = std::int32_t;
inline constexpr int kUnbounded = -1;

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::int32_t a = 0;  // kBytes: byte-set index; kRepeat: min; kRef: rule id
  std::int32_t b = 0;  // kRepeat: max (kUnbounded for no limit)
  std::vector<ExprId> children;  // kSeq / kAlt: the parts; kRepeat: the repeated expression
};

// Rules reference each other by id, so recursion (JSON values, $ref cycles, EBNF) is plain data.
// Builders simplify as they go (one-element sequences collapse, nested sequences flatten).
class Grammar {
 public:
  ExprId empty();
  ExprId bytes(const ByteSet& set);
  ExprId byte(std::uint8_t b);
  ExprId literal(std::string_view text);  // the exact bytes of text
  ExprId seq(std::vector<ExprId> parts);
  ExprId alt(std::vector<ExprId> options);
  ExprId repeat(ExprId item, int min, int max);
  ExprId optional(ExprId item) { return repeat(item, 0, 1); }
  ExprId star(ExprId item) { return repeat(item, 0, kUnbounded); }
  ExprId ref(RuleId rule);

  // Declares a rule (body set later, so rules can refer to each other); names must be unique.
  RuleId add_rule(std::string name);
  // A fresh rule whose name starts with hint (suffixes make it unique).
  RuleId add_unique_rule(std::string_view hint);
  void set_body(RuleId rule, ExprId body);
  RuleId find_rule(std::string_view name) const;  // -1 when absent
  // Copies every rule of `other` into this grammar (names prefixed, made unique) and returns the
  // copy of its root rule: how a grammar embeds another (a JSON value inside tool-call syntax).
  RuleId import_grammar(const Grammar& other, std::string_view prefix);

  const Expr& expr(ExprId id) const { return exprs_[id]; }
  const ByteSet& byte_set(std::int32_t index) const { return byte_sets_[index]; }
  int num_byte_sets() const { return static_cast<int>(byte_sets_.size()); }
  int num_exprs() const { return static_cast<int>(exprs_.size()); }
  int num_rules() const { return static_cast<int>(rules_.size()); }
  const std::string& rule_name(RuleId rule) const { return rules_[rule].name; }
  ExprId rule_body(RuleId rule) const { return rules_[rule].body; }
  RuleId root() const { return root_; }
  void set_root(RuleId rule) { root_ = rule; }

  // Throws deepinfer::Error naming any rule without a body or a missing root.
  void validate() const;
  // Readable EBNF-like text (bytes outside printable ASCII as \xHH), for errors and debugging.
  std::string to_string() const;
  std::string expr_to_string(ExprId id) const;

 private:
  struct Rule {
    std::string name;
    ExprId body = -1;
  };
  ExprId add(Expr e);

  std::vector<Expr> exprs_;
  std::vector<ByteSet> byte_sets_;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, RuleId> rule_index_;
  RuleId root_ = -1;
};

}  // namespace deepinfer::grammar
