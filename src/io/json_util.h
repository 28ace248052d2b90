// JSON parsing for untrusted files (config.json, index and tokenizer files): errors name the file,
// and nesting is limited so that comparing or printing a value can never recurse deeply.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace deepinfer::io {

inline constexpr int kMaxJsonDepth = 64;  // real configs nest 3 levels deep

// Parses `text`; throws deepinfer::Error "<label>: not valid JSON: ..." or "<label>: JSON nested
// deeper than 64 levels".
nlohmann::json parse_json(std::string_view text, std::string_view label);

}  // namespace deepinfer::io
