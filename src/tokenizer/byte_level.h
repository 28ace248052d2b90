// GPT-2's byte-level alphabet: each byte 0-255 is written as one printable Unicode character in the
// vocabulary and merges of byte-level BPE tokenizers. We tokenize in byte space and use this table
// only to read the vocabulary and to decode token strings.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// The character that stands for byte b in byte-level token strings.
char32_t byte_to_char(unsigned char b);

// The bytes a byte-level token string stands for, or nullopt if some character of it is not in
// the byte alphabet (such a token can never come out of byte-level BPE). token must be valid UTF-8.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// The bytes HF's ByteLevel decoder produces for one token string: the mapped bytes when every
// character is in the alphabet, otherwise the token's own UTF-8 (how added tokens decode).
std::string decode_byte_level_token(std::string_view token);

// The byte-level spelling of raw bytes (the inverse of byte_level_to_bytes).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace deepinfer::tokenizer
