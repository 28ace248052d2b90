// Glue between the grammar engine and the rest of deepinfer: the engine's TokenConstraint
// interface implemented over Matcher (with a per-model compile cache), a gate that leaves the
// reasoning part unconstrained until the end-of-thinking token, and the Vocabulary of a loaded
// tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar {

// The tokenizer's tokens by id; added tokens are excluded (never allowed), end_ids end generation
// (default: the tokenizer's eos). vocab_size is the logits width (>= the tokenizer's size).
std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const tokenizer::Tokenizer& tok, int vocab_size,
                                                            std::vector<std::int32_t> end_ids = {});

class GrammarConstraint final : public engine::TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar) : matcher_(std::move(grammar)) {}
  void fill_next_token_bitmask(std::span<std::uint32_t> bitmask) override { matcher_.fill_next_token_bitmask(bitmask); }
  bool accept_token(std::int32_t token) override { return matcher_.accept_token(token); }
  void rollback(int n) override { matcher_.rollback(n); }
  bool is_terminated() const override { return matcher_.is_terminated(); }

 private:
  Matcher matcher_;
};

// Everything is allowed until think_end_id has been accepted; from the next token on, the inner
// constraint decides. Rollback works across the boundary.
class ReasoningGatedConstraint final : public engine::TokenConstraint {
 public:
  ReasoningGatedConstraint(std::unique_ptr<engine::TokenConstraint> inner, std::int32_t think_end_id, int vocab_size);
  void fill_next_token_bitmask(std::span<std::uint32_t> bitmask) override;
  bool accept_token(std::int32_t token) override;
  void rollback(int n) override;
  bool is_terminated() const override { return started_ && inner_->is_terminated(); }

 private:
  std::unique_ptr<engine::TokenConstraint> inner_;
  std::int32_t think_end_id_;
  int vocab_size_;
  bool started_ = false;
  std::vector<bool> delegated_;  // per accepted token: whether the inner constraint took it
};

// SamplingParams.so_args -> a constraint. Compiles through a shared, thread-safe LRU cache; an
// invalid schema / regex / grammar throws deepinfer::Error before the request is queued. With
// think_end_id set, each constraint starts after that token (thinking mode).
class GrammarConstraintFactory final : public engine::TokenConstraintFactory {
 public:
  GrammarConstraintFactory(std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool = nullptr,
                           std::optional<std::int32_t> think_end_id = std::nullopt);
  std::unique_ptr<engine::TokenConstraint> create(const engine::StructuredOutputArgs& args) const override;

 private:
  mutable GrammarCompiler compiler_;
  std::optional<std::int32_t> think_end_id_;
};

}  // namespace deepinfer::grammar
