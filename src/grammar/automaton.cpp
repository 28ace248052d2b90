// Grammar -> per-rule NFAs (non-recursive rules inlined, shared by continuation) -> DFAs by subset
// construction, then the analyses the matcher relies on (pruning, left recursion, follow sets).
#include "grammar/automaton.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <map>
#include <unordered_map>

#include "common/error.h"
#include "grammar/automaton_analysis.h"

namespace deepinfer::grammar {
namespace {

struct VectorHash {
  std::size_t operator()(const std::vector<std::int32_t>& v) const {
    std::size_t h = v.size();
    for (auto x : v) h = (h ^ static_cast<std::size_t>(x)) * 0x100000001b3ull;
    return h;
  }
};

// Partitions the 256 byte values so every byte set of the grammar is a union of classes.
std::vector<std::uint8_t> byte_partition(const Grammar& g, int& num_classes) {
  std::vector<int> cls(256, 0);
  int n = 1;
  for (int i = 0; i < g.num_byte_sets(); ++i) {
    const ByteSet& s = g.byte_set(i);
    std::map<std::pair<int, bool>, int> renumber;
    std::vector<int> next(256);
    for (int b = 0; b < 256; ++b) {
      auto key = std::make_pair(cls[b], s.test(static_cast<std::uint8_t>(b)));
      auto it = renumber.try_emplace(key, static_cast<int>(renumber.size())).first;
      next[b] = it->second;
    }
    cls = next;
    n = static_cast<int>(renumber.size());
  }
  num_classes = n;
  return std::vector<std::uint8_t>(cls.begin(), cls.end());
}

// Rules on a reference cycle (Tarjan SCC); these become called DFAs instead of being inlined.
std::vector<bool> recursive_rules(const Grammar& g) {
  int n = g.num_rules();
  std::vector<std::vector<int>> refs(n);
  for (int r = 0; r < n; ++r) {
    std::vector<ExprId> stack{g.rule_body(r)};
    while (!stack.empty()) {
      const Expr& e = g.expr(stack.back());
      stack.pop_back();
      if (e.kind == ExprKind::kRef) refs[r].push_back(e.a);
      for (ExprId c : e.children) stack.push_back(c);
    }
  }
  std::vector<int> index(n, -1), low(n, 0), scc_stack;
  std::vector<bool> on_stack(n, false), recursive(n, false);
  int counter = 0;
  std::function<void(int)> connect = [&](int v) {
    index[v] = low[v] = counter++;
    scc_stack.push_back(v);
    on_stack[v] = true;
    for (int w : refs[v]) {
      if (w == v) recursive[v] = true;
      if (index[w] < 0) {
        connect(w);
        low[v] = std::min(low[v], low[w]);
      } else if (on_stack[w]) {
        low[v] = std::min(low[v], index[w]);
      }
    }
    if (low[v] == index[v]) {
      std::vector<int> members;
      int w = -1;
      do {
        w = scc_stack.back();
        scc_stack.pop_back();
        on_stack[w] = false;
        members.push_back(w);
      } while (w != v);
      if (members.size() > 1) {
        for (int m : members) recursive[m] = true;
      }
    }
  };
  for (int r = 0; r < n; ++r) {
    if (index[r] < 0) connect(r);
  }
  return recursive;
}

struct Nfa {
  struct State {
    std::vector<std::int32_t> eps;
    std::vector<std::pair<std::int32_t, std::int32_t>> bytes;  // (byte-set index, target)
    std::vector<std::pair<std::int32_t, std::int32_t>> calls;  // (grammar rule, target)
  };
  std::vector<State> states;
};

}  // namespace

class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& g, const AutomatonLimits& limits)
      : g_(g), limits_(limits), recursive_(recursive_rules(g)), est_(g.num_exprs(), -1) {
    auto classes = byte_partition(g, num_classes_);
    std::copy(classes.begin(), classes.end(), a_.byte_class_.begin());
    a_.num_classes_ = num_classes_;
    set_classes_.resize(g.num_byte_sets());
    for (int i = 0; i < g.num_byte_sets(); ++i) {
      std::vector<bool> seen(num_classes_, false);
      for (int b = 0; b < 256; ++b) {
        int c = classes[b];
        if (g.byte_set(i).test(static_cast<std::uint8_t>(b)) && !seen[c]) {
          seen[c] = true;
          set_classes_[i].push_back(c);
        }
      }
    }
  }

  Automaton build() {
    dfa_index_.assign(g_.num_rules(), -1);
    request_rule(g_.root());
    for (std::size_t i = 0; i < pending_.size(); ++i) build_rule_dfa(pending_[i], static_cast<int>(i));
    finalize_calls();
    analyze_automaton(a_);
    return std::move(a_);
  }

 private:
  int request_rule(RuleId r) {
    if (dfa_index_[r] < 0) {
      dfa_index_[r] = static_cast<int>(pending_.size());
      pending_.push_back(r);
    }
    return dfa_index_[r];
  }

  // Estimated NFA size of an expression with non-recursive references expanded (saturating).
  long long estimate(ExprId id) {
    if (est_[id] >= 0) return est_[id];
    est_[id] = 1;  // guards cycles through rule bodies (recursive rules count 1 anyway)
    const Expr& e = g_.expr(id);
    long long size = 1;
    switch (e.kind) {
      case ExprKind::kEmpty:
      case ExprKind::kBytes:
        size = 1;
        break;
      case ExprKind::kSeq:
      case ExprKind::kAlt:
        for (ExprId c : e.children) size += estimate(c);
        break;
      case ExprKind::kRepeat: {
        long long copies = e.b == kUnbounded ? std::max(e.a, 1) : e.b;
        size = estimate(e.children[0]) * copies + 1;
        break;
      }
      case ExprKind::kRef:
        size = recursive_[e.a] ? 1 : estimate(g_.rule_body(e.a)) + 1;
        break;
    }
    est_[id] = std::min(size, static_cast<long long>(INT_MAX));
    return est_[id];
  }

  std::int32_t add_state() {
    if (static_cast<int>(nfa_.states.size()) >= limits_.max_nfa_states) {
      throw_error("grammar: rule '{}' expands to more than {} automaton states; simplify it",
                  g_.rule_name(current_rule_), limits_.max_nfa_states);
    }
    nfa_.states.emplace_back();
    return static_cast<std::int32_t>(nfa_.states.size() - 1);
  }
  void eps(std::int32_t from, std::int32_t to) {
    if (from != to) nfa_.states[from].eps.push_back(to);
  }

  void build_expr(ExprId id, std::int32_t from, std::int32_t to) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        eps(from, to);
        return;
      case ExprKind::kBytes:
        if (!g_.byte_set(e.a).empty()) nfa_.states[from].bytes.emplace_back(e.a, to);
        return;
      case ExprKind::kSeq: {
        std::int32_t cur = from;
        for (std::size_t i = 0; i < e.children.size(); ++i) {
          std::int32_t nxt = i + 1 == e.children.size() ? to : add_state();
          build_expr(e.children[i], cur, nxt);
          cur = nxt;
        }
        return;
      }
      case ExprKind::kAlt:
        for (ExprId c : e.children) build_expr(c, from, to);
        return;
      case ExprKind::kRepeat:
        build_repeat(e, from, to);
        return;
      case ExprKind::kRef:
        build_ref(e.a, from, to);
        return;
    }
  }

  void build_repeat(const Expr& e, std::int32_t from, std::int32_t to) {
    ExprId child = e.children[0];
    int min = e.a;
    int max = e.b;
    // Copies multiply the cost of inlining rules inside the repeated expression.
    long long saved = multiplier_;
    multiplier_ = std::min<long long>(multiplier_ * (max == kUnbounded ? std::max(min, 1) + 1 : max), INT_MAX);
    build_repeat_copies(child, min, max, from, to);
    multiplier_ = saved;
  }

  void build_repeat_copies(ExprId child, int min, int max, std::int32_t from, std::int32_t to) {
    std::int32_t cur = from;
    for (int i = 0; i < min; ++i) {
      std::int32_t nxt = (i + 1 == min && max == min) ? to : add_state();
      build_expr(child, cur, nxt);
      cur = nxt;
    }
    if (max == min) return;
    if (max == kUnbounded) {
      std::int32_t loop = add_state();
      eps(cur, loop);
      build_expr(child, loop, loop);
      eps(loop, to);
      return;
    }
    for (int i = min; i < max; ++i) {
      eps(cur, to);
      std::int32_t nxt = i + 1 == max ? to : add_state();
      build_expr(child, cur, nxt);
      cur = nxt;
    }
  }

  void build_ref(RuleId rule, std::int32_t from, std::int32_t to) {
    auto key = std::make_pair(rule, to);
    if (auto it = memo_.find(key); it != memo_.end()) {
      eps(from, it->second);
      return;
    }
    bool on_stack = std::find(inline_stack_.begin(), inline_stack_.end(), rule) != inline_stack_.end();
    if (recursive_[rule] || on_stack || estimate(g_.rule_body(rule)) * multiplier_ > limits_.inline_budget) {
      nfa_.states[from].calls.emplace_back(rule, to);
      request_rule(rule);
      return;
    }
    std::int32_t entry = add_state();
    memo_.emplace(key, entry);
    eps(from, entry);
    inline_stack_.push_back(rule);
    build_expr(g_.rule_body(rule), entry, to);
    inline_stack_.pop_back();
  }

  void closure(std::vector<std::int32_t>& set) {
    ++stamp_;
    if (mark_.size() < nfa_.states.size()) mark_.resize(nfa_.states.size(), 0);
    std::vector<std::int32_t> stack(set.begin(), set.end());
    set.clear();
    while (!stack.empty()) {
      std::int32_t s = stack.back();
      stack.pop_back();
      if (mark_[s] == stamp_) continue;
      mark_[s] = stamp_;
      set.push_back(s);
      for (std::int32_t t : nfa_.states[s].eps) stack.push_back(t);
    }
    std::sort(set.begin(), set.end());
  }

  void build_rule_dfa(RuleId rule, int dfa_rule) {
    current_rule_ = rule;
    nfa_ = Nfa{};
    memo_.clear();
    inline_stack_ = {rule};
    std::int32_t start = add_state();
    std::int32_t final_state = add_state();
    memo_.emplace(std::make_pair(rule, final_state), start);  // tail self-reference = loop
    build_expr(g_.rule_body(rule), start, final_state);

    std::unordered_map<std::vector<std::int32_t>, std::int32_t, VectorHash> ids;
    std::vector<std::vector<std::int32_t>> sets;
    auto intern = [&](std::vector<std::int32_t> set) {
      closure(set);
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      if (a_.num_states() + 1 > limits_.max_states) {
        throw_error("grammar: more than {} automaton states (at rule '{}'); simplify it",
                    limits_.max_states, g_.rule_name(rule));
      }
      auto id = static_cast<std::int32_t>(a_.num_states());
      ids.emplace(set, id);
      sets.push_back(std::move(set));
      a_.state_rule_.push_back(dfa_rule);
      a_.final_.push_back(0);
      a_.next_.resize(a_.next_.size() + num_classes_, -1);
      pending_calls_.emplace_back();
      return id;
    };
    std::int32_t base = a_.num_states();
    a_.rule_start_.push_back(intern({start}));
    a_.rule_names_.push_back(g_.rule_name(rule));
    std::vector<std::vector<std::int32_t>> by_class(num_classes_);
    for (std::int32_t d = base; d - base < static_cast<std::int32_t>(sets.size()); ++d) {
      std::vector<std::int32_t> set = sets[d - base];
      std::map<RuleId, std::vector<std::int32_t>> by_call;
      for (auto& v : by_class) v.clear();
      for (std::int32_t s : set) {
        if (s == final_state) a_.final_[d] = 1;
        for (auto [set_index, target] : nfa_.states[s].bytes) {
          for (int c : set_classes_[set_index]) by_class[c].push_back(target);
        }
        for (auto [callee, target] : nfa_.states[s].calls) by_call[callee].push_back(target);
      }
      for (int c = 0; c < num_classes_; ++c) {
        if (by_class[c].empty()) continue;
        std::int32_t t = intern(std::move(by_class[c]));
        a_.next_[static_cast<std::size_t>(d) * num_classes_ + c] = t;
        by_class[c] = {};
      }
      for (auto& [callee, targets] : by_call) {
        std::int32_t t = intern(std::move(targets));  // may grow pending_calls_
        pending_calls_[d].emplace_back(callee, t);
      }
    }
  }

  // Call edges name grammar rules while building; map them to DFA rule indices.
  void finalize_calls() {
    a_.call_begin_.assign(a_.num_states() + 1, 0);
    for (int s = 0; s < a_.num_states(); ++s) {
      a_.call_begin_[s] = static_cast<std::int32_t>(a_.calls_.size());
      for (auto [rule, target] : pending_calls_[s]) a_.calls_.push_back(CallEdge{dfa_index_[rule], target});
    }
    a_.call_begin_[a_.num_states()] = static_cast<std::int32_t>(a_.calls_.size());
  }

  const Grammar& g_;
  AutomatonLimits limits_;
  std::vector<bool> recursive_;
  std::vector<long long> est_;
  int num_classes_ = 0;
  std::vector<std::vector<int>> set_classes_;
  Automaton a_;
  std::vector<int> dfa_index_;
  std::vector<RuleId> pending_;
  std::vector<std::vector<std::pair<RuleId, std::int32_t>>> pending_calls_;
  // Per rule being built:
  RuleId current_rule_ = -1;
  long long multiplier_ = 1;
  Nfa nfa_;
  std::map<std::pair<RuleId, std::int32_t>, std::int32_t> memo_;
  std::vector<RuleId> inline_stack_;
  std::vector<std::uint32_t> mark_;
  std::uint32_t stamp_ = 0;
};

Automaton build_automaton(const Grammar& grammar, const AutomatonLimits& limits) {
  grammar.validate();
  return AutomatonBuilder(grammar, limits).build();
}

}  // namespace deepinfer::grammar
