// Shared helpers for the grammar tests: a small byte-level vocabulary, string acceptance, and a
// brute-force mask (accept every token on a copy of the matcher) to check the fast one against.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar::testing {

// Ids 0..255 are the single bytes; then multi-byte tokens typical of JSON and text; then two
// special tokens (one of them the end token). The logits are wider than the tokenizer.
inline std::shared_ptr<const Vocabulary> small_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\": ", "\",", "\", \"", "\"}", "true", "false", "null", "abc", "name",
                        " the", "12", "345", "0.5", "-1", "  ", "\n", "\n  ", "},", "}]", "[{", "é", "\xC3", "\xA9",
                        "中文", "ab\"", "a\"b", "\\n", "\\u00", "e+", "1e5", "yes", "no", "<note>", "</note>"}) {
    tokens.push_back(t);
  }
  tokens.push_back("<special>");
  tokens.push_back("<end>");
  auto special = static_cast<std::int32_t>(tokens.size() - 2);
  auto end = static_cast<std::int32_t>(tokens.size() - 1);
  return std::make_shared<const Vocabulary>(tokens, static_cast<int>(tokens.size()) + 40,
                                            std::vector<std::int32_t>{special}, std::vector<std::int32_t>{end});
}

inline std::shared_ptr<const CompiledGrammar> compile(ConstraintKind kind, const std::string& text,
                                                     std::shared_ptr<const Vocabulary> vocab = small_vocab()) {
  return compile_grammar(grammar_from_constraint(ConstraintSpec{kind, text}), std::move(vocab));
}

// True when the whole string is a sentence of the grammar.
inline bool accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_stop();
}

inline bool bit(const std::vector<std::uint32_t>& mask, int id) { return (mask[id >> 5] >> (id & 31)) & 1; }

// The mask obtained by trying every token on a copy of the matcher.
inline std::vector<std::uint32_t> brute_force_mask(const Matcher& m) {
  const Vocabulary& vocab = *m.grammar().vocab;
  std::vector<std::uint32_t> mask(vocab.bitmask_words(), 0);
  for (int id = 0; id < vocab.size(); ++id) {
    Matcher copy = m;
    if (copy.accept_token(id)) mask[id >> 5] |= 1u << (id & 31);
  }
  return mask;
}

}  // namespace deepinfer::grammar::testing
