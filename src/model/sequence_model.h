// The interface through which the engine's runner and the CLI drive any DeepSeek model
// (deepseek_v4, deepseek_v41): per-sequence state and forward passes over mixed prefill chunks
// and decode tokens of several sequences. open_model (model/open_model.h) picks the
// implementation from the checkpoint's config.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "io/model_config.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "ops/backend.h"

namespace deepinfer::model {

class SequenceModel {
 public:
  // Tokens to append to one sequence; logits are produced for its last num_logits tokens.
  struct Chunk {
    v4::SequenceState* state = nullptr;
    std::span<const std::int32_t> tokens;
    std::int32_t num_logits = 0;
  };

  virtual ~SequenceModel() = default;

  virtual const io::ModelConfig& config() const = 0;
  virtual const v4::Numerics& numerics() const = 0;
  virtual ops::Backend& backend() const = 0;

  // Empty state (position 0) in contiguous backend memory.
  virtual std::unique_ptr<v4::SequenceState> new_sequence() const = 0;

  // Appends each chunk's tokens to its sequence (positions continue from state->num_tokens) and
  // writes f32 logits [Σ num_logits, vocab] (chunk order) into `logits`, a backend tensor. Token
  // ids outside the vocabulary, empty chunks and a sequence given twice are errors.
  virtual void forward(std::span<const Chunk> chunks, Tensor& logits) = 0;
};

}  // namespace deepinfer::model
