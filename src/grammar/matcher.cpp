// Matcher: the union of cached per-state masks over the live stack tops, plus an exact pushdown
// walk for the few context-dependent tokens; history of kernels for rollback.
#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/thread_pool.h"

namespace deepinfer::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), pda_(grammar_->automaton) {
  int depth = grammar_->vocab->trie().max_depth() + 2;
  levels_.resize(depth);
  ready_.resize(depth);
  ready_valid_.resize(depth);
  marks_.resize(depth);
  reset();
}

void Matcher::reset() {
  pda_.arena().clear();
  steps_.clear();
  kernels_.clear();
  std::int32_t root = pda_.push(grammar_->automaton.rule_start(grammar_->automaton.root()), -1);
  kernels_.push_back(root);
  steps_.push_back(Step{0, 1, pda_.arena().size(), false});
}

void Matcher::current_kernel(std::vector<std::int32_t>& out) const {
  const Step& s = steps_.back();
  out.assign(kernels_.begin() + static_cast<std::ptrdiff_t>(s.kernel_begin),
             kernels_.begin() + static_cast<std::ptrdiff_t>(s.kernel_end));
}

bool Matcher::push_step(const std::vector<std::int32_t>& kernel, bool terminated) {
  std::size_t begin = kernels_.size();
  kernels_.insert(kernels_.end(), kernel.begin(), kernel.end());
  steps_.push_back(Step{begin, kernels_.size(), pda_.arena().size(), terminated});
  return true;
}

bool Matcher::collect_heads() {
  const Automaton& a = grammar_->automaton;
  const auto& arena = pda_.arena();
  heads_.clear();
  bool can_stop = false;
  const Step& s = steps_.back();
  for (std::size_t i = s.kernel_begin; i < s.kernel_end; ++i) {
    // A frame that can complete without a byte also stands for its caller's return frame.
    for (std::int32_t n = kernels_[i]; n >= 0;) {
      if (std::find(heads_.begin(), heads_.end(), n) != heads_.end()) break;
      heads_.push_back(n);
      std::int32_t st = arena[n].state;
      if (!a.can_finish(st)) break;
      if (arena[n].parent < 0) can_stop = true;
      n = arena[n].parent;
    }
  }
  return can_stop;
}

bool Matcher::can_stop() const {
  return const_cast<Matcher*>(this)->collect_heads();
}

void Matcher::fill_next_token_bitmask(std::span<std::uint32_t> bitmask) {
  const Vocabulary& vocab = *grammar_->vocab;
  DI_CHECK(static_cast<int>(bitmask.size()) >= vocab.bitmask_words(), "grammar: bitmask has {} words, need {}",
           bitmask.size(), vocab.bitmask_words());
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  auto allow_end = [&] {
    for (std::int32_t id : vocab.end_ids()) bitmask[id >> 5] |= 1u << (id & 31);
  };
  if (is_terminated()) {
    allow_end();
    return;
  }
  bool stop = collect_heads();
  const auto& arena = pda_.arena();
  for (std::int32_t h : heads_) {
    const StateTokens& st = grammar_->tokens[arena[h].state];
    if (!st.dense.empty()) {
      for (std::size_t w = 0; w < st.dense.size(); ++w) bitmask[w] |= st.dense[w];
    } else {
      for (std::int32_t id : st.sparse) bitmask[id >> 5] |= 1u << (id & 31);
    }
  }
  std::size_t mark = pda_.arena().size();
  for (std::size_t i = 0; i < heads_.size(); ++i) {
    std::int32_t h = heads_[i];
    const StateTokens& st = grammar_->tokens[pda_.arena()[h].state];
    if (!st.uncertain.empty()) check_uncertain(h, st.uncertain, bitmask);
    pda_.arena().resize(mark);
  }
  if (stop) allow_end();
}

void Matcher::check_uncertain(std::int32_t head, const std::vector<std::int32_t>& ranks,
                              std::span<std::uint32_t> mask) {
  const Vocabulary& vocab = *grammar_->vocab;
  const auto& ids = vocab.trie().sorted_ids();
  levels_[0] = {head};
  marks_[0] = pda_.arena().size();
  ready_valid_[0] = 0;
  std::string_view prev;
  std::size_t valid = 0;  // levels_[0..valid] hold the kernels of prev's prefixes
  for (std::int32_t r : ranks) {
    std::int32_t id = ids[r];
    if ((mask[id >> 5] >> (id & 31)) & 1) continue;
    std::string_view tok = vocab.token_bytes(id);
    std::size_t d = 0;
    std::size_t limit = std::min({tok.size(), prev.size(), valid});
    while (d < limit && tok[d] == prev[d]) ++d;
    while (d < tok.size() && !levels_[d].empty()) {
      if (!ready_valid_[d]) {
        pda_.arena().resize(marks_[d]);
        pda_.closure(levels_[d], ready_[d]);
        ready_valid_[d] = 1;
        marks_[d] = pda_.arena().size();
      } else {
        pda_.arena().resize(marks_[d]);
      }
      pda_.advance(ready_[d], static_cast<std::uint8_t>(tok[d]), levels_[d + 1]);
      ++d;
      ready_valid_[d] = 0;
      marks_[d] = pda_.arena().size();
    }
    valid = d;
    prev = tok;
    if (d == tok.size() && !levels_[d].empty()) mask[id >> 5] |= 1u << (id & 31);
  }
}

bool Matcher::accept_token(std::int32_t token) {
  const Vocabulary& vocab = *grammar_->vocab;
  if (is_terminated() || token < 0 || token >= vocab.size()) return false;
  if (vocab.is_end(token)) {
    if (!can_stop()) return false;
    current_kernel(kernel_);
    return push_step(kernel_, true);
  }
  if (vocab.is_excluded(token)) return false;
  return accept_bytes(vocab.token_bytes(token));
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (is_terminated()) return false;
  std::size_t mark = pda_.arena().size();
  current_kernel(kernel_);
  if (!pda_.run(kernel_, bytes, next_kernel_)) {
    pda_.arena().resize(mark);
    return false;
  }
  return push_step(next_kernel_, false);
}

void Matcher::rollback(int n) {
  DI_CHECK(n >= 0 && n <= num_steps(), "grammar: cannot roll back {} steps, only {} were accepted", n,
           num_steps());
  for (int i = 0; i < n; ++i) steps_.pop_back();
  kernels_.resize(steps_.back().kernel_end);
  pda_.arena().resize(steps_.back().arena_size);
}

void fill_next_token_bitmasks(std::span<Matcher* const> matchers, std::span<std::uint32_t> bitmask,
                              int bitmask_words, ThreadPool* pool) {
  DI_CHECK(bitmask.size() >= matchers.size() * static_cast<std::size_t>(bitmask_words),
           "grammar: bitmask too small for {} rows", matchers.size());
  auto fill = [&](std::size_t i) {
    if (matchers[i]) {
      matchers[i]->fill_next_token_bitmask(bitmask.subspan(i * bitmask_words, bitmask_words));
    }
  };
  if (pool && matchers.size() > 1) {
    pool->parallel_for(matchers.size(), fill);
  } else {
    for (std::size_t i = 0; i < matchers.size(); ++i) fill(i);
  }
}

void apply_token_bitmask(std::span<float> logits, std::span<const std::uint32_t> bitmask) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::size_t covered = std::min(logits.size(), bitmask.size() * 32);
  for (std::size_t w = 0; w * 32 < covered; ++w) {
    std::uint32_t bits = bitmask[w];
    if (bits == 0xFFFFFFFFu) continue;
    std::size_t end = std::min(covered, w * 32 + 32);
    for (std::size_t i = w * 32; i < end; ++i) {
      if (!((bits >> (i & 31)) & 1)) logits[i] = neg_inf;
    }
  }
  for (std::size_t i = covered; i < logits.size(); ++i) logits[i] = neg_inf;
}

}  // namespace deepinfer::grammar
