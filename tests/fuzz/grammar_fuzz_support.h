// Shared body of the grammar fuzzers: compile a constraint against a tiny vocabulary with small
// automaton limits (so every input finishes quickly), then walk a few tokens chosen by the input.
// deepinfer::Error is the expected outcome for bad input; anything else is a bug.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar::fuzz {

inline std::shared_ptr<const Vocabulary> fuzz_vocab() {
  static const auto kVocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", "\",", "true", "null", "ab", "12", "  ", "\xC3\xA9", "\\u00", "</end>"}) {
      tokens.push_back(t);
    }
    tokens.push_back("<eos>");
    auto end = static_cast<std::int32_t>(tokens.size() - 1);
    return std::make_shared<const Vocabulary>(tokens, static_cast<int>(tokens.size()), std::vector<std::int32_t>{},
                                              std::vector<std::int32_t>{end});
  }();
  return kVocab;
}

inline void run_constraint(ConstraintKind kind, const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  AutomatonLimits limits;
  limits.max_states = 5000;
  limits.max_nfa_states = 50000;
  std::shared_ptr<const CompiledGrammar> g;
  try {
    g = compile_grammar(grammar_from_constraint(ConstraintSpec{kind, text}), fuzz_vocab(), nullptr, limits);
  } catch (const Error&) {
    return;
  }
  Matcher m(g);
  std::vector<std::uint32_t> mask(g->vocab->bitmask_words());
  for (std::size_t step = 0; step < 16 && !m.is_terminated(); ++step) {
    m.fill_next_token_bitmask(mask);
    std::vector<int> allowed;
    for (int id = 0; id < g->vocab->size(); ++id) {
      if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) __builtin_trap();  // a valid prefix must always have a next token
    int pick = allowed[(size + step * 31) % allowed.size()];
    if (!m.accept_token(pick)) __builtin_trap();  // allowed tokens must be accepted
  }
  if (m.num_steps() > 0) m.rollback(1);
}

}  // namespace deepinfer::grammar::fuzz
