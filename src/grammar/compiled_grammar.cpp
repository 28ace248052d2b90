// compile_grammar: grammar -> automaton -> token cache.
#include "grammar/compiled_grammar.h"

#include "common/error.h"

namespace deepinfer::grammar {

std::shared_ptr<const CompiledGrammar> compile_grammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab,
                                                       ThreadPool* pool, const AutomatonLimits& limits) {
  DI_CHECK(vocab != nullptr, "grammar: compile needs a vocabulary");
  auto out = std::make_shared<CompiledGrammar>();
  out->automaton = build_automaton(grammar, limits);
  out->grammar = std::move(grammar);
  out->tokens = build_token_cache(out->automaton, *vocab, pool, &out->stats);
  out->vocab = std::move(vocab);
  return out;
}

}  // namespace deepinfer::grammar
