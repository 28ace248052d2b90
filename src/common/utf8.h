// UTF-8 validation, repair and streaming helpers shared by the tokenizer, the chat encoding and the
// server: one definition of "invalid" for the whole code base, Unicode's "maximal subpart" rule
// (the one Python's errors='replace' and Rust's from_utf8_lossy follow).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deepinfer::utf8 {

// U+FFFD REPLACEMENT CHARACTER, encoded.
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

enum class SequenceStatus { kValid, kInvalid, kTruncated };

struct Sequence {
  SequenceStatus status;
  // kValid: the sequence's length. kInvalid: the length of the maximal invalid subpart (>= 1),
  // which one U+FFFD replaces. kTruncated: the bytes left, a proper prefix of a valid sequence.
  std::size_t length;
};

// Classifies the bytes starting at text[pos] (pos < text.size()).
Sequence scan(std::string_view text, std::size_t pos);

bool is_valid(std::string_view text);

// Appends text to out with every maximal invalid subpart (and a truncated tail) replaced by
// U+FFFD; identical to Python's bytes.decode('utf-8', errors='replace').
void append_lossy(std::string& out, std::string_view text);
std::string to_valid(std::string_view text);

// Number of trailing bytes of text that form a truncated but still completable sequence (0-3):
// what a streaming decoder must hold back until more bytes arrive.
std::size_t incomplete_tail_length(std::string_view text);

// Decodes the valid sequence at text[pos] and advances pos; text must be valid there.
char32_t decode_valid(std::string_view text, std::size_t& pos);

void append_code_point(std::string& out, char32_t code_point);

}  // namespace deepinfer::utf8
