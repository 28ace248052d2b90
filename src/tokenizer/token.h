// Token ids and added-token descriptions: the small vocabulary types every user of the tokenizer
// (encoding, engine, server, grammar) shares.
#pragma once

#include <cstdint>
#include <string>

namespace deepinfer::tokenizer {

using TokenId = std::int32_t;

// One entry of tokenizer.json's "added_tokens" with the id HF tokenizers assigns it.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens = true)
  bool normalized = true;    // matched after normalization (ours are all the identity)
  bool single_word = false;  // only matched when not inside a word
  bool lstrip = false;       // swallows whitespace on its left
  bool rstrip = false;       // swallows whitespace on its right
};

}  // namespace deepinfer::tokenizer
