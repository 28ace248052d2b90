// EBNF grammars in the GBNF dialect xgrammar and llama.cpp accept: `name ::= body` rules with
// "strings", [character classes], (groups), |, * + ? {m,n}, # comments; the root rule is `root`.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// Throws deepinfer::Error naming line and column for syntax errors, undefined rules, a missing
// root rule and unsupported extensions (lookahead assertions, macros). Direct left recursion
// (A ::= A x | y) is rewritten to iteration; indirect left recursion is reported at compile time.
Grammar grammar_from_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace deepinfer::grammar
