// What the engine needs of a structured-output constraint (the grammar subsystem implements it
// over its matcher): the allowed next tokens as a bitmask, advancing over committed tokens, and
// rollback for speculative rows. Masks are filled on a thread pool while the model runs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/sampling_params.h"

namespace deepinfer::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the allowed next tokens: ceil(vocab / 32) words, bit i of word w = token 32w + i.
  virtual void fill_next_token_bitmask(std::span<std::uint32_t> bitmask) = 0;
  // Advances over a token; false (state unchanged) if the constraint does not allow it.
  virtual bool accept_token(std::int32_t token) = 0;
  // Undoes the last n accepted tokens.
  virtual void rollback(int n) = 0;
  // The constraint accepted its end: the sequence is complete.
  virtual bool is_terminated() const = 0;
};

class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  // A fresh constraint for one sequence; throws deepinfer::Error naming the problem for an
  // invalid schema, regex or grammar (the request then fails before it is queued). Called from
  // add_request, so it may be slow the first time (compile) but should cache by argument.
  virtual std::unique_ptr<TokenConstraint> create(const StructuredOutputArgs& args) const = 0;
};

}  // namespace deepinfer::engine
