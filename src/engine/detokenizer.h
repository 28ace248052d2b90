// What the engine needs of a tokenizer to produce text while generating: an incremental
// detokenizer per sequence. The tokenizer subsystem adapts its own streaming decoder to this.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace deepinfer::engine {

// A stream is used by one thread at a time, but not always the same one (the engine's workers
// detokenize different sequences in parallel), so streams must not share mutable state.
class DetokenizerStream {
 public:
  virtual ~DetokenizerStream() = default;
  // Text that became final with `token` (complete UTF-8 only; may be empty).
  virtual std::string push(std::int32_t token) = 0;
  // Whatever is still buffered at the end of the sequence.
  virtual std::string finish() = 0;
};

class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // A stream that continues after `prompt` (so the first output token's leading space and
  // merges are decoded as in the full text).
  virtual std::unique_ptr<DetokenizerStream> open(std::span<const std::int32_t> prompt,
                                                  bool skip_special_tokens) const = 0;
};

}  // namespace deepinfer::engine
