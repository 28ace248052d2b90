// Token classification per automaton state by a depth-first walk of the vocabulary trie, starting
// from a fresh stack whose bottom frame is the state's rule. Subtrees made only of bytes that loop
// on the current state are accepted wholesale, which keeps free-text states (JSON strings) cheap.
#include "grammar/token_cache.h"

#include <array>
#include <atomic>

#include "common/thread_pool.h"
#include "grammar/pda.h"

namespace deepinfer::grammar {
namespace {

constexpr std::int32_t kDenseThreshold = 4096;

class StateClassifier {
 public:
  StateClassifier(const Automaton& a, const Vocabulary& vocab)
      : a_(a), vocab_(vocab), trie_(vocab.trie()), pda_(a) {
    int depth = trie_.max_depth() + 2;
    kernels_.resize(depth);
    ready_.resize(depth);
    ready_valid_.resize(depth);
    completed_.resize(depth);
    uncertain_path_.resize(depth);
    arena_mark_.resize(depth);
  }

  StateTokens classify(std::int32_t state) {
    std::vector<std::int32_t> accepted_ranks;
    StateTokens out;
    const auto& nodes = trie_.nodes();
    const ByteSet& follow = a_.follow(a_.rule_of(state));
    pda_.arena().clear();
    kernels_[0] = {pda_.push(state, -1)};
    arena_mark_[0] = pda_.arena().size();
    ready_valid_[0] = false;
    uncertain_path_[0] = false;
    auto n_nodes = static_cast<std::int32_t>(nodes.size());
    for (std::int32_t i = 1; i < n_nodes;) {
      const auto& node = nodes[i];
      int d = node.depth;
      int pd = d - 1;
      if (!ready_valid_[pd]) {
        pda_.arena().resize(arena_mark_[pd]);
        completed_[pd] = pda_.closure(kernels_[pd], ready_[pd]);
        ready_valid_[pd] = true;
        arena_mark_[pd] = pda_.arena().size();
      } else {
        pda_.arena().resize(arena_mark_[pd]);
      }
      // Completing the state's rule after >= 1 byte, with the next byte able to follow the rule
      // somewhere: the token's fate depends on the caller.
      bool uncertain = uncertain_path_[pd] || (pd > 0 && completed_[pd] && follow.test(node.byte));
      pda_.advance(ready_[pd], node.byte, kernels_[d]);
      if (kernels_[d].empty()) {
        if (uncertain) {
          for (std::int32_t r = node.tok_lo; r < node.tok_hi; ++r) out.uncertain.push_back(r);
        }
        i = node.subtree_end;
        continue;
      }
      if (covered_by_self_loop(i, kernels_[d])) {
        for (std::int32_t r = node.tok_lo; r < node.tok_hi; ++r) accepted_ranks.push_back(r);
        i = node.subtree_end;
        continue;
      }
      for (std::int32_t r = node.tok_lo; r < node.exact_end; ++r) accepted_ranks.push_back(r);
      arena_mark_[d] = pda_.arena().size();
      ready_valid_[d] = false;
      uncertain_path_[d] = uncertain;
      ++i;
    }
    finish(accepted_ranks, out);
    return out;
  }

 private:
  // Whole subtrees accepted without walking: bytes that loop on the state, a bounded run of one
  // byte family, or JSON-string text within the state's character budget.
  bool covered_by_self_loop(std::int32_t node, const std::vector<std::int32_t>& kernel) {
    const auto& tn = trie_.nodes()[node];
    if (tn.subtree_end == node + 1) return false;  // a leaf: nothing below to skip
    const ByteSet& below = trie_.below(node);
    std::uint8_t families = trie_.families(node);
    bool text = trie_.text_ok(node);
    int chars = trie_.text_chars(node);
    for (std::int32_t n : kernel) {
      std::int32_t s = pda_.arena()[n].state;
      if (text && chars <= a_.text_depth(s)) return true;
      for (int f = 0; families >> f; ++f) {
        if (((families >> f) & 1) && tn.height <= a_.run_depth(s, f)) return true;
      }
      if (below.subset_of(a_.self_loop(s))) return true;
    }
    return false;
  }

  void finish(const std::vector<std::int32_t>& ranks, StateTokens& out) {
    const auto& ids = trie_.sorted_ids();
    out.num_accepted = static_cast<std::int32_t>(ranks.size());
    if (out.num_accepted > kDenseThreshold) {
      out.dense.assign(vocab_.bitmask_words(), 0);
      for (std::int32_t r : ranks) {
        std::int32_t id = ids[r];
        out.dense[id >> 5] |= 1u << (id & 31);
      }
    } else {
      out.sparse.reserve(ranks.size());
      for (std::int32_t r : ranks) out.sparse.push_back(ids[r]);
      std::sort(out.sparse.begin(), out.sparse.end());
    }
  }

  const Automaton& a_;
  const Vocabulary& vocab_;
  const TokenTrie& trie_;
  Pda pda_;
  std::vector<std::vector<std::int32_t>> kernels_;
  std::vector<std::vector<StackNode>> ready_;
  std::vector<std::uint8_t> ready_valid_;
  std::vector<std::uint8_t> completed_;
  std::vector<std::uint8_t> uncertain_path_;
  std::vector<std::size_t> arena_mark_;
};

}  // namespace

std::vector<StateTokens> build_token_cache(const Automaton& a, const Vocabulary& vocab, ThreadPool* pool,
                                           TokenCacheStats* stats) {
  std::vector<StateTokens> cache(a.num_states());
  std::size_t workers = pool ? pool->size() + 1 : 1;
  std::atomic<std::int32_t> next_state{0};
  auto work = [&](std::size_t) {
    StateClassifier classifier(a, vocab);
    for (std::int32_t s = next_state++; s < a.num_states(); s = next_state++) {
      if (!a.is_dead_end(s)) cache[s] = classifier.classify(s);
    }
  };
  if (pool && workers > 1) {
    pool->parallel_for(workers, work);
  } else {
    work(0);
  }
  if (stats) {
    for (const auto& st : cache) {
      stats->accepted += st.num_accepted;
      stats->uncertain += static_cast<std::int64_t>(st.uncertain.size());
      stats->bytes += static_cast<std::int64_t>(st.dense.size() * 4 + st.sparse.size() * 4 + st.uncertain.size() * 4);
    }
  }
  return cache;
}

}  // namespace deepinfer::grammar
