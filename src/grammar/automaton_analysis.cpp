// Analyses over the rule DFAs: productivity pruning (no token may lead into a state that cannot
// finish), nullable rules and the left-recursion check, and FIRST/FOLLOW byte sets that let the
// token-mask precompute reject most tokens that would leave a rule.
#include "grammar/automaton_analysis.h"

#include <algorithm>
#include <array>
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

// run_depth(s, f) = 0 if some byte of family f has no transition, else 1 + the minimum over the
// targets, iterated down from the cap to the fixpoint.
void compute_run_depths(Automaton& a, const std::vector<ByteSet>& bytes_of) {
  const int n = a.num_states();
  const int k = a.num_classes();
  a.run_depth_.assign(static_cast<std::size_t>(n) * kNumByteFamilies, 0);
  for (int f = 0; f < kNumByteFamilies; ++f) {
    std::vector<int> classes;
    const auto& p = byte_family(f).words();
    for (int c = 0; c < k; ++c) {
      const auto& w = bytes_of[c].words();
      if ((w[0] & p[0]) | (w[1] & p[1]) | (w[2] & p[2]) | (w[3] & p[3])) classes.push_back(c);
    }
    std::vector<int> depth(n, 255);
    for (bool changed = true; changed;) {
      changed = false;
      for (int s = 0; s < n; ++s) {
        int d = 255;
        for (int c : classes) {
          std::int32_t t = a.next_[static_cast<std::size_t>(s) * k + c];
          d = t < 0 ? 0 : std::min(d, depth[t] + 1);
          if (d == 0) break;
        }
        if (d < depth[s]) {
          depth[s] = d;
          changed = true;
        }
      }
    }
    for (int s = 0; s < n; ++s) a.run_depth_[static_cast<std::size_t>(s) * kNumByteFamilies + f] = static_cast<std::uint8_t>(depth[s]);
  }
}

namespace {

struct ByteRange {
  std::uint8_t lo;
  std::uint8_t hi;
};

// The byte shapes of the characters a JSON string holds unescaped (UTF-8, no controls, quote or
// backslash).
const std::vector<std::vector<ByteRange>>& text_char_shapes() {
  static const std::vector<std::vector<ByteRange>> kShapes = {
      {{0x20, 0x21}}, {{0x23, 0x5B}}, {{0x5D, 0x7F}},
      {{0xC2, 0xDF}, {0x80, 0xBF}},
      {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
      {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
      {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
  };
  return kShapes;
}

// Follows every byte sequence of one shape from s; false when some sequence has no path.
bool follow_shape(const Automaton& a, std::int32_t s, const std::vector<ByteRange>& shape, std::size_t pos,
                  std::vector<std::int32_t>& ends) {
  if (pos == shape.size()) {
    if (std::find(ends.begin(), ends.end(), s) == ends.end()) ends.push_back(s);
    return true;
  }
  std::vector<std::uint8_t> seen_classes;
  for (int b = shape[pos].lo; b <= shape[pos].hi; ++b) {
    std::uint8_t c = a.byte_class(static_cast<std::uint8_t>(b));
    if (std::find(seen_classes.begin(), seen_classes.end(), c) != seen_classes.end()) continue;
    seen_classes.push_back(c);
    std::int32_t t = a.next(s, static_cast<std::uint8_t>(b));
    if (t < 0 || !follow_shape(a, t, shape, pos + 1, ends)) return false;
  }
  return true;
}

}  // namespace

void compute_text_depths(Automaton& a) {
  const int n = a.num_states();
  std::vector<std::vector<std::int32_t>> targets(n);
  std::vector<int> depth(n, 255);
  for (int s = 0; s < n; ++s) {
    for (const auto& shape : text_char_shapes()) {
      if (!follow_shape(a, s, shape, 0, targets[s])) {
        depth[s] = 0;
        targets[s].clear();
        break;
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 0; s < n; ++s) {
      if (depth[s] == 0) continue;
      int d = 255;
      for (std::int32_t t : targets[s]) d = std::min(d, depth[t] + 1);
      if (d < depth[s]) {
        depth[s] = d;
        changed = true;
      }
    }
  }
  a.text_depth_.assign(depth.begin(), depth.end());
}

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
  compute_run_depths(a, bytes_of);
  compute_text_depths(a);
}

}  // namespace deepinfer::grammar
