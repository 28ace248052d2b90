// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it (", " and ": "
// separators, keys in insertion order), which is how DeepSeek's reference encoder renders tool
// schemas, response formats and non-string tool arguments into the prompt.
#pragma once

#include "encoding/chat_types.h"

#include <string>
#include <string_view>

namespace deepinfer::encoding {

std::string python_json_dumps(const Json& value);

// Appends `text` escaped as the inside of a JSON string (no quotes): '"', '\\' and control
// characters below U+0020 escaped, everything else (including non-ASCII bytes) copied. Escaping
// is per byte, so escaping the pieces of a string and concatenating equals escaping the whole.
void append_json_escaped(std::string& out, std::string_view text);

// `text` as a quoted JSON string.
std::string json_quote(std::string_view text);

}  // namespace deepinfer::encoding
