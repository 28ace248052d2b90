// The per-state token classification computed at compile time (xgrammar's adaptive token mask):
// for every automaton state, the tokens accepted whatever the enclosing stack is, and the few
// "uncertain" ones whose fate depends on the caller (they complete the state's rule mid-token).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/vocabulary.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::grammar {

struct StateTokens {
  // Accepted tokens, either as a dense bitmask (bitmask_words uint32) or a sorted id list.
  std::vector<std::uint32_t> dense;
  std::vector<std::int32_t> sparse;
  // Uncertain tokens as trie ranks (ascending, so neighbours share prefixes).
  std::vector<std::int32_t> uncertain;
  std::int32_t num_accepted = 0;
};

struct TokenCacheStats {
  std::int64_t accepted = 0;
  std::int64_t uncertain = 0;
  std::int64_t bytes = 0;
};

// Classifies every token for every state; pool may be null (single-threaded).
std::vector<StateTokens> build_token_cache(const Automaton& a, const Vocabulary& vocab, ThreadPool* pool,
                                           TokenCacheStats* stats = nullptr);

}  // namespace deepinfer::grammar
