// Lowers a Grammar to a pushdown automaton: one DFA per rule that must stay a rule (recursion,
// size), whose edges consume a byte class or call another rule's DFA. Non-recursive rules are
// inlined, so most of a JSON schema becomes one DFA and most tokens are context-independent.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

struct AutomatonLimits {
  // DFA states over all rules: each costs one vocabulary walk at compile time, so this bounds
  // compile time (roughly 0.1-0.3 ms per state on one core) for hostile schemas.
  int max_states = 100000;
  int max_nfa_states = 2000000;    // NFA states while building one rule
  // Estimated NFA size (times the copies a bounded repeat makes) above which a rule is called
  // instead of inlined: inlining makes more tokens context-independent, calling keeps one copy.
  int inline_budget = 5000;
};

struct CallEdge {
  std::int32_t rule;          // callee (index into Automaton rules)
  std::int32_t return_state;  // where the caller continues after the callee completes
};

class Automaton {
 public:
  int num_states() const { return static_cast<int>(state_rule_.size()); }
  int num_classes() const { return num_classes_; }
  int num_rules() const { return static_cast<int>(rule_start_.size()); }
  int root() const { return 0; }

  std::uint8_t byte_class(std::uint8_t b) const { return byte_class_[b]; }
  // Next state after consuming byte b in state s, or -1.
  std::int32_t next(std::int32_t s, std::uint8_t b) const {
    return next_[static_cast<std::size_t>(s) * num_classes_ + byte_class_[b]];
  }
  bool is_final(std::int32_t s) const { return final_[s] != 0; }
  std::int32_t rule_of(std::int32_t s) const { return state_rule_[s]; }
  std::int32_t rule_start(std::int32_t rule) const { return rule_start_[rule]; }
  const std::string& rule_name(std::int32_t rule) const { return rule_names_[rule]; }
  const CallEdge* calls_begin(std::int32_t s) const { return calls_.data() + call_begin_[s]; }
  const CallEdge* calls_end(std::int32_t s) const { return calls_.data() + call_begin_[s + 1]; }
  bool has_calls(std::int32_t s) const { return call_begin_[s] != call_begin_[s + 1]; }
  // Bytes b with next(s, b) == s: a token made only of these stays in s.
  const ByteSet& self_loop(std::int32_t s) const { return self_loop_[s]; }
  // Bytes that can follow a completion of rule r in some caller (r's own DFA excluded).
  const ByteSet& follow(std::int32_t rule) const { return follow_[rule]; }
  // True when s has no way to consume a byte or call: it can only complete its rule.
  bool is_dead_end(std::int32_t s) const { return dead_end_[s] != 0; }
  // True when s can complete its rule without consuming a byte (final, or via nullable calls).
  bool can_finish(std::int32_t s) const { return can_finish_[s] != 0; }
  // Byte families for which run_depth(s, f) says how many bytes of family f are certainly
  // consumable from s, whatever they are (capped at 255): a token made of that many such bytes is
  // accepted without walking it. Families: printable ASCII except quote and backslash (JSON
  // string text), word characters with '-', digits.
  static constexpr int kNumFamilies = 3;
  static const ByteSet& family(int f);
  // How many characters that a JSON string may hold unescaped (any of them, in any order) are
  // certainly consumable from s (capped at 255). Pairs with TokenTrie::text_chars.
  int text_depth(std::int32_t s) const { return text_depth_[s]; }
  int run_depth(std::int32_t s, int f) const { return run_depth_[static_cast<std::size_t>(s) * kNumByteFamilies + f]; }
  // True when s has at least one byte transition.
  bool consumes_bytes(std::int32_t s) const { return consumes_[s] != 0; }

 private:
  friend class AutomatonBuilder;
  friend void analyze_automaton(Automaton& a);
  friend void compute_run_depths(Automaton& a, const std::vector<ByteSet>& bytes_of);
  friend void compute_text_depths(Automaton& a);
  int num_classes_ = 0;
  std::array<std::uint8_t, 256> byte_class_{};
  std::vector<std::int32_t> state_rule_;
  std::vector<std::uint8_t> final_;
  std::vector<std::uint8_t> dead_end_;
  std::vector<std::uint8_t> can_finish_;
  std::vector<std::uint8_t> consumes_;
  std::vector<std::uint8_t> run_depth_;
  std::vector<std::uint8_t> text_depth_;
  std::vector<std::int32_t> next_;
  std::vector<std::int32_t> call_begin_;
  std::vector<CallEdge> calls_;
  std::vector<ByteSet> self_loop_;
  std::vector<std::int32_t> rule_start_;
  std::vector<std::string> rule_names_;
  std::vector<ByteSet> follow_;
};

// Throws deepinfer::Error for grammars that match nothing, use left recursion the front end could
// not remove (naming the rules of the cycle), or exceed the limits.
Automaton build_automaton(const Grammar& grammar, const AutomatonLimits& limits = {});

}  // namespace deepinfer::grammar
