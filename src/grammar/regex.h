// Regular expressions (the Python `re` syntax vLLM and SGLang accept) compiled to grammar
// expressions. Matching is always a full match; classes \d \w \s are ASCII (re.ASCII semantics,
// which is also what JSON Schema's ECMA-262 patterns mean).
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct RegexOptions {
  // Inside a JSON string: characters JSON must escape (quote, backslash, controls) are produced
  // in their escaped form, so the decoded string value is what the regex matches.
  bool json_string = false;
  // What to call the pattern in error messages ("regex", "pattern of properties.zip", ...).
  std::string_view context = "regex";
};

// Throws deepinfer::Error (naming the construct and its offset) on invalid or unsupported syntax:
// backreferences, lookaround, word boundaries, inline flags and possessive quantifiers.
ExprId regex_to_expr(Grammar& g, std::string_view pattern, const RegexOptions& options = {});

Grammar grammar_from_regex(std::string_view pattern);

}  // namespace deepinfer::grammar
