// The pushdown runtime over an Automaton: persistent stacks in an arena (a stack is a node and its
// parent chain, shared between alternatives), and the closure / byte-advance steps that both the
// compile-time token classification and the per-request matcher run. Header-only: it is the hot loop.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace deepinfer::grammar {

struct StackNode {
  std::int32_t state;
  std::int32_t parent;  // node id of the caller's return frame, -1 at the bottom
};

// A set of (state, parent) pairs with O(1) clear, for de-duplicating configurations in one step.
class PairSet {
 public:
  PairSet() : keys_(64), stamps_(64, 0) {}
  void clear() {
    if (++stamp_ == 0) {
      std::fill(stamps_.begin(), stamps_.end(), 0);
      stamp_ = 1;
    }
    size_ = 0;
  }
  // Returns true when the pair was not yet present.
  bool insert(std::int32_t state, std::int32_t parent) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(state)) << 32) |
                        static_cast<std::uint32_t>(parent);
    std::size_t mask = keys_.size() - 1;
    for (std::size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (stamps_[i] != stamp_) {
        stamps_[i] = stamp_;
        keys_[i] = key;
        ++size_;
        return true;
      }
      if (keys_[i] == key) return false;
    }
  }

 private:
  static std::size_t hash(std::uint64_t k) { return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
  void grow() {
    std::vector<std::uint64_t> old_keys;
    std::vector<std::uint32_t> old_stamps;
    old_keys.swap(keys_);
    old_stamps.swap(stamps_);
    keys_.assign(old_keys.size() * 2, 0);
    stamps_.assign(old_keys.size() * 2, 0);
    std::uint32_t old_stamp = stamp_;
    stamp_ = 1;
    size_ = 0;
    for (std::size_t i = 0; i < old_keys.size(); ++i) {
      if (old_stamps[i] == old_stamp) {
        auto k = old_keys[i];
        insert(static_cast<std::int32_t>(k >> 32), static_cast<std::int32_t>(k & 0xFFFFFFFFu));
      }
    }
  }
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint32_t> stamps_;
  std::uint32_t stamp_ = 1;
  std::size_t size_ = 0;
};

class Pda {
 public:
  // Parse stacks kept per step. Unambiguous and mildly ambiguous grammars stay far below; a
  // grammar whose ambiguity grows exponentially (A ::= B | C with B, C alike) is pruned here to
  // bound the time per token, which can only remove continuations, never allow a wrong one.
  static constexpr std::size_t kMaxStacks = 4096;

  explicit Pda(const Automaton& a) : a_(a) {}

  std::vector<StackNode>& arena() { return arena_; }
  std::int32_t push(std::int32_t state, std::int32_t parent) {
    arena_.push_back(StackNode{state, parent});
    return static_cast<std::int32_t>(arena_.size() - 1);
  }

  // A node for (state, parent), reusing an existing identical one: return frames are shared, so
  // equal stacks have equal ids and ambiguous grammars keep a polynomial number of stacks.
  // Entries of truncated nodes are detected by re-checking the arena, so no cleanup is needed.
  std::int32_t intern(std::int32_t state, std::int32_t parent) {
    std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(state)) << 32) |
                        static_cast<std::uint32_t>(parent);
    auto [it, inserted] = frames_.try_emplace(key, 0);
    if (!inserted) {
      std::int32_t id = it->second;
      if (id < static_cast<std::int32_t>(arena_.size()) && arena_[id].state == state && arena_[id].parent == parent) {
        return id;
      }
    }
    it->second = push(state, parent);
    return it->second;
  }

  // Expands kernel nodes through calls and completions into the configurations that can consume
  // a byte (state, parent pairs). Returns true when the bottom frame can complete here (then the
  // whole stack can stop). Creates return-frame nodes in the arena.
  bool closure(const std::vector<std::int32_t>& kernel, std::vector<StackNode>& ready) {
    ready.clear();
    if (kernel.size() == 1) {  // the common case: one stack, no call or completion to expand
      const StackNode& only = arena_[kernel[0]];
      if (!a_.has_calls(only.state) && !a_.is_final(only.state)) {
        if (a_.consumes_bytes(only.state)) ready.push_back(only);
        return false;
      }
    }
    seen_.clear();
    work_.clear();
    bool bottom_completed = false;
    for (std::int32_t n : kernel) work_.push_back(arena_[n]);
    while (!work_.empty()) {
      StackNode c = work_.back();
      work_.pop_back();
      if (!seen_.insert(c.state, c.parent)) continue;
      if (a_.consumes_bytes(c.state)) ready.push_back(c);
      if (ready.size() >= kMaxStacks) break;
      if (a_.has_calls(c.state)) {
        for (const CallEdge* e = a_.calls_begin(c.state); e != a_.calls_end(c.state); ++e) {
          std::int32_t ret = intern(e->return_state, c.parent);
          work_.push_back(StackNode{a_.rule_start(e->rule), ret});
        }
      }
      if (a_.is_final(c.state)) {
        if (c.parent < 0) {
          bottom_completed = true;
        } else {
          work_.push_back(arena_[c.parent]);
        }
      }
    }
    return bottom_completed;
  }

  // The kernel after consuming byte b from the ready configurations.
  void advance(const std::vector<StackNode>& ready, std::uint8_t b, std::vector<std::int32_t>& out) {
    out.clear();
    if (ready.size() == 1) {  // no duplicates possible
      std::int32_t t = a_.next(ready[0].state, b);
      if (t >= 0) out.push_back(push(t, ready[0].parent));
      return;
    }
    seen_.clear();
    for (const StackNode& c : ready) {
      std::int32_t t = a_.next(c.state, b);
      if (t >= 0 && seen_.insert(t, c.parent)) out.push_back(push(t, c.parent));
      if (out.size() >= kMaxStacks) break;
    }
  }

  // Runs bytes from a kernel; out is the resulting kernel (empty when rejected).
  bool run(const std::vector<std::int32_t>& kernel, std::string_view bytes, std::vector<std::int32_t>& out) {
    out = kernel;
    for (char ch : bytes) {
      closure(out, ready_);
      advance(ready_, static_cast<std::uint8_t>(ch), tmp_);
      out.swap(tmp_);
      if (out.empty()) return false;
    }
    return true;
  }

 private:
  const Automaton& a_;
  std::vector<StackNode> arena_;
  std::unordered_map<std::uint64_t, std::int32_t> frames_;
  std::vector<StackNode> work_;
  std::vector<StackNode> ready_;
  std::vector<std::int32_t> tmp_;
  PairSet seen_;
};

}  // namespace deepinfer::grammar
