// Streaming detokenization: turns ids into text as they are generated, emitting only complete
// UTF-8, so a client never sees half a character; the pieces always add up to decode(ids).
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

class IncrementalDetokenizer {
 public:
  // tokenizer must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Adds one token; returns the text that became final (valid UTF-8, possibly empty). Bytes that
  // may still complete a character are held back; bytes that can never be valid come out as
  // U+FFFD at once. Throws deepinfer::Error on an id outside the vocabulary.
  std::string push(TokenId id);
  // Same as push, appending to out; returns the number of bytes appended.
  std::size_t push_into(TokenId id, std::string& out);
  // Ends the stream: the held-back bytes (a truncated character) as U+FFFD, or "".
  std::string finish();
  // Bytes held back waiting for the rest of a character (0-3 bytes).
  std::string_view pending() const { return pending_; }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace deepinfer::tokenizer
