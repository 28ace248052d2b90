// A grammar compiled against one vocabulary: the automaton plus its per-state token cache.
// Immutable and shared by every Matcher (one per request) that uses it.
#pragma once

#include <memory>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_cache.h"
#include "grammar/vocabulary.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::grammar {

struct CompiledGrammar {
  Grammar grammar;
  Automaton automaton;
  std::vector<StateTokens> tokens;  // indexed by automaton state
  std::shared_ptr<const Vocabulary> vocab;
  TokenCacheStats stats;
};

// Lowers grammar to an automaton and classifies the vocabulary for each state. pool (optional)
// parallelizes the classification. Throws deepinfer::Error for unusable grammars.
std::shared_ptr<const CompiledGrammar> compile_grammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab,
                                                       ThreadPool* pool = nullptr,
                                                       const AutomatonLimits& limits = {});

}  // namespace deepinfer::grammar
