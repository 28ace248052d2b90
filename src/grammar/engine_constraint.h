// Glue between the grammar engine and the rest of deepinfer: the engine's TokenConstraint
// interface implemented over Matcher (with a per-model compile cache), a gate that leaves the
// reasoning part unconstrained until the end-of-thinking text, and the Vocabulary of a loaded
// tokenizer.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
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

// Where a text marker (e.g. "</think>") ends in the token stream, whatever tokens spell it: a
// Knuth-Morris-Pratt automaton over the marker's bytes, stepped over each token's bytes, and per
// automaton state the tokens allowed before the marker is complete. Those are all real tokens
// except padded ids and the tokens that would complete the marker and go on past it (the text
// after the marker belongs to the constraint, which sees whole tokens only). Immutable, shared.
class TextMarkerGate {
 public:
  TextMarkerGate(std::shared_ptr<const Vocabulary> vocab, std::string marker);
  static constexpr int kComplete = -1;
  static constexpr int kCrossing = -2;
  // The state after `token` from `state`: kComplete when the marker ends exactly at the token's
  // end, kCrossing when it ends inside the token (not allowed), else the new automaton state.
  int advance(int state, std::int32_t token) const;
  std::span<const std::uint32_t> allowed(int state) const { return allowed_[state]; }
  const std::string& marker() const { return marker_; }

 private:
  int step(int state, std::uint8_t byte) const { return next_[state * 256 + byte]; }

  std::shared_ptr<const Vocabulary> vocab_;
  std::string marker_;
  std::vector<int> next_;  // marker.size() states x 256 bytes; value marker.size() = complete
  std::vector<std::vector<std::uint32_t>> allowed_;
};

// Everything (but padded ids and marker-crossing tokens) is allowed until the gate's marker has
// been generated; from the next token on, the inner constraint decides. Rollback works across
// the boundary.
class ReasoningGatedConstraint final : public engine::TokenConstraint {
 public:
  ReasoningGatedConstraint(std::unique_ptr<engine::TokenConstraint> inner, std::shared_ptr<const TextMarkerGate> gate);
  void fill_next_token_bitmask(std::span<std::uint32_t> bitmask) override;
  bool accept_token(std::int32_t token) override;
  void rollback(int n) override;
  bool is_terminated() const override { return started_ && inner_->is_terminated(); }

 private:
  struct Accepted {
    int state_before;  // the gate's state before the token (when not delegated)
    bool delegated;    // the inner constraint took the token
  };
  std::unique_ptr<engine::TokenConstraint> inner_;
  std::shared_ptr<const TextMarkerGate> gate_;
  int state_ = 0;
  bool started_ = false;
  std::vector<Accepted> history_;
};

// SamplingParams.so_args -> a constraint. Compiles through a shared, thread-safe LRU cache; an
// invalid schema / regex / grammar throws deepinfer::Error before the request is queued. With
// so_args.start_after set (thinking mode: "</think>"), the constraint starts after that text.
class GrammarConstraintFactory final : public engine::TokenConstraintFactory {
 public:
  explicit GrammarConstraintFactory(std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool = nullptr);
  std::unique_ptr<engine::TokenConstraint> create(const engine::StructuredOutputArgs& args) const override;

 private:
  std::shared_ptr<const TextMarkerGate> gate_for(const std::string& marker) const;

  mutable GrammarCompiler compiler_;
  mutable std::mutex gates_mutex_;
  mutable std::map<std::string, std::shared_ptr<const TextMarkerGate>> gates_;
};

// The factory `serve` and deepinfer::LLM install on their engine: constraints over the
// tokenizer's vocabulary (logits width vocab_size), ended by end_ids (the model's EOS ids).
std::shared_ptr<GrammarConstraintFactory> make_grammar_constraint_factory(const tokenizer::Tokenizer& tok,
                                                                          int vocab_size,
                                                                          std::vector<std::int32_t> end_ids,
                                                                          ThreadPool* pool = nullptr);

}  // namespace deepinfer::grammar
