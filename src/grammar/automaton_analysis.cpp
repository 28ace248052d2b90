// Analyses over the rule DFAs: productivity pruning (no token may lead into a state that cannot
// finish), nullable rules and the left-recursion check, and FIRST/FOLLOW byte sets that let the
// token-mask precompute reject most tokens that would leave a rule.
#include "grammar/automaton_analysis.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace deepinfer::grammar {
namespace {

std::vector<ByteSet> class_bytes(const Automaton& a) {
  std::vector<ByteSet> out(a.num_classes());
  for (int b = 0; b < 256; ++b) out[a.byte_class(static_cast<std::uint8_t>(b))].set(static_cast<std::uint8_t>(b));
  return out;
}

}  // namespace

void analyze_automaton(Automaton& a) {
  const int n = a.num_states();
  const int k = a.num_classes();
  const int rules = a.num_rules();

  // Productive states: final, or a byte edge / call (with productive callee) to a productive one.
  std::vector<std::vector<std::int32_t>> preds(n);
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> call_sites(rules);  // (state, return)
  for (int s = 0; s < n; ++s) {
    for (int c = 0; c < k; ++c) {
      std::int32_t t = a.next_[static_cast<std::size_t>(s) * k + c];
      if (t >= 0) preds[t].push_back(s);
    }
    for (const CallEdge* e = a.calls_begin(s); e != a.calls_end(s); ++e) {
      preds[e->return_state].push_back(~s);  // marks a call predecessor
      call_sites[e->rule].emplace_back(s, e->return_state);
    }
  }
  std::vector<std::uint8_t> productive(n, 0), rule_productive(rules, 0);
  std::vector<std::int32_t> work;
  auto mark = [&](std::int32_t s) {
    if (!productive[s]) {
      productive[s] = 1;
      work.push_back(s);
    }
  };
  auto call_ok = [&](std::int32_t s, std::int32_t ret) {
    for (const CallEdge* e = a.calls_begin(s); e != a.calls_end(s); ++e) {
      if (e->return_state == ret && rule_productive[e->rule]) return true;
    }
    return false;
  };
  for (int s = 0; s < n; ++s) {
    if (a.final_[s]) mark(s);
  }
  while (!work.empty()) {
    std::int32_t t = work.back();
    work.pop_back();
    int r = a.rule_of(t);
    if (a.rule_start(r) == t && !rule_productive[r]) {
      rule_productive[r] = 1;
      for (auto [s, ret] : call_sites[r]) {
        if (productive[ret]) mark(s);
      }
    }
    for (std::int32_t p : preds[t]) {
      if (p >= 0) {
        mark(p);
      } else if (call_ok(~p, t)) {
        mark(~p);
      }
    }
  }
  DI_CHECK(productive[a.rule_start(a.root())], "grammar: the grammar matches no string at all");
  for (int s = 0; s < n; ++s) {
    for (int c = 0; c < k; ++c) {
      auto& t = a.next_[static_cast<std::size_t>(s) * k + c];
      if (t >= 0 && !productive[t]) t = -1;
    }
  }
  std::vector<CallEdge> calls;
  std::vector<std::int32_t> begin(n + 1, 0);
  for (int s = 0; s < n; ++s) {
    begin[s] = static_cast<std::int32_t>(calls.size());
    for (const CallEdge* e = a.calls_begin(s); e != a.calls_end(s); ++e) {
      if (rule_productive[e->rule] && productive[e->return_state]) calls.push_back(*e);
    }
  }
  begin[n] = static_cast<std::int32_t>(calls.size());
  a.calls_ = std::move(calls);
  a.call_begin_ = std::move(begin);

  // Nullable rules (can complete without consuming a byte), to a fixpoint.
  std::vector<std::uint8_t> nullable(rules, 0);
  auto reaches_final_without_bytes = [&](std::int32_t from, std::vector<int>* left_calls) {
    std::vector<std::int32_t> stack{from};
    std::vector<std::int32_t> seen;
    bool found = false;
    while (!stack.empty()) {
      std::int32_t s = stack.back();
      stack.pop_back();
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      if (a.final_[s]) found = true;
      for (const CallEdge* e = a.calls_begin(s); e != a.calls_end(s); ++e) {
        if (left_calls) left_calls->push_back(e->rule);
        if (nullable[e->rule]) stack.push_back(e->return_state);
      }
    }
    return found;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < rules; ++r) {
      if (!nullable[r] && reaches_final_without_bytes(a.rule_start(r), nullptr)) {
        nullable[r] = 1;
        changed = true;
      }
    }
  }

  // Left recursion: a rule that can call itself (directly or not) before consuming a byte would
  // make the pushdown closure infinite.
  std::vector<std::vector<int>> left(rules);
  for (int r = 0; r < rules; ++r) reaches_final_without_bytes(a.rule_start(r), &left[r]);
  std::vector<int> color(rules, 0), path;
  std::function<void(int)> visit = [&](int r) {
    color[r] = 1;
    path.push_back(r);
    for (int q : left[r]) {
      if (color[q] == 1) {
        std::string cycle;
        auto it = std::find(path.begin(), path.end(), q);
        for (; it != path.end(); ++it) cycle += a.rule_name(*it) + " -> ";
        throw_error("grammar: left recursion is not supported ({}{})", cycle, a.rule_name(q));
      }
      if (color[q] == 0) visit(q);
    }
    path.pop_back();
    color[r] = 2;
  };
  for (int r = 0; r < rules; ++r) {
    if (color[r] == 0) visit(r);
  }

  // FIRST byte sets per state (fixpoint through nullable calls), then FOLLOW per rule.
  auto bytes_of = class_bytes(a);
  std::vector<ByteSet> first(n);
  for (int s = 0; s < n; ++s) {
    for (int c = 0; c < k; ++c) {
      if (a.next_[static_cast<std::size_t>(s) * k + c] >= 0) first[s] |= bytes_of[c];
    }
  }
  std::vector<std::uint8_t> can_finish(n, 0);
  for (int s = 0; s < n; ++s) can_finish[s] = reaches_final_without_bytes(s, nullptr) ? 1 : 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 0; s < n; ++s) {
      for (const CallEdge* e = a.calls_begin(s); e != a.calls_end(s); ++e) {
        ByteSet add = first[a.rule_start(e->rule)];
        if (nullable[e->rule]) add |= first[e->return_state];
        if (!add.subset_of(first[s])) {
          first[s] |= add;
          changed = true;
        }
      }
    }
  }
  a.follow_.assign(rules, ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 0; s < n; ++s) {
      for (const CallEdge* e = a.calls_begin(s); e != a.calls_end(s); ++e) {
        ByteSet add = first[e->return_state];
        if (can_finish[e->return_state]) add |= a.follow_[a.rule_of(s)];
        if (!add.subset_of(a.follow_[e->rule])) {
          a.follow_[e->rule] |= add;
          changed = true;
        }
      }
    }
  }

  a.self_loop_.assign(n, ByteSet{});
  a.dead_end_.assign(n, 0);
  a.consumes_.assign(n, 0);
  a.can_finish_ = can_finish;
  for (int s = 0; s < n; ++s) {
    bool consumes = false;
    for (int c = 0; c < k; ++c) {
      std::int32_t t = a.next_[static_cast<std::size_t>(s) * k + c];
      if (t >= 0) consumes = true;
      if (t == s) a.self_loop_[s] |= bytes_of[c];
    }
    a.consumes_[s] = consumes ? 1 : 0;
    a.dead_end_[s] = (consumes || a.has_calls(s)) ? 0 : 1;
  }
}

}  // namespace deepinfer::grammar
