// Grammar pieces for JSON scalars shared by the JSON-schema converter: strings with length bounds
// and formats, integers and numbers with exact bounds.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// One JSON string character in its encoded form (plain character or escape sequence).
ExprId json_char(Grammar& g);
// A complete JSON string (quotes included) of min..max characters (max kUnbounded for none).
ExprId json_string(Grammar& g, int min_length, int max_length);
// A JSON string whose decoded value fully matches the regex.
ExprId json_string_pattern(Grammar& g, std::string_view pattern, std::string_view path);
// A JSON string in one of the supported formats; throws for others, naming the format and path.
ExprId json_string_format(Grammar& g, std::string_view format, std::string_view path);
// A JSON string with plain (unescaped) characters only, different from every name in excluded.
ExprId json_key_excluding(Grammar& g, const std::vector<std::string>& excluded);

// Integers in [lo, hi] (either may be absent).
ExprId json_integer(Grammar& g, std::optional<long long> lo, std::optional<long long> hi);
// Numbers x with lo <= x <= hi (or < / > when exclusive). Bounds must be integers.
ExprId json_number(Grammar& g, std::optional<double> lo, bool lo_exclusive, std::optional<double> hi,
                   bool hi_exclusive, std::string_view path);

}  // namespace deepinfer::grammar
