// Per-request grammar state: which tokens may come next (as a bitmask over the logits), advancing
// by sampled tokens, completion, and rollback of the last N tokens for speculative decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Writes the allowed next tokens into bitmask (vocab.bitmask_words() words; bit i of word w is
  // token 32w+i). Special tokens are never allowed; end tokens only when the grammar can stop.
  void fill_next_token_bitmask(std::span<std::uint32_t> bitmask);
  // Advances by one sampled token; false (state unchanged) when the grammar does not allow it.
  // Accepting an end token terminates the matcher.
  bool accept_token(std::int32_t token);
  // Advances by raw bytes (forced text); counts as one step for rollback.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (tokens or byte strings); n may not exceed num_steps().
  void rollback(int n);
  void reset();

  bool can_stop() const;  // the text so far is a complete sentence of the grammar
  bool is_terminated() const { return steps_.back().terminated; }
  int num_steps() const { return static_cast<int>(steps_.size()) - 1; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Step {
    std::size_t kernel_begin;
    std::size_t kernel_end;
    std::size_t arena_size;
    bool terminated;
  };
  void current_kernel(std::vector<std::int32_t>& out) const;
  bool collect_heads();  // fills heads_; returns can_stop
  void check_uncertain(std::int32_t head, const std::vector<std::int32_t>& ranks, std::span<std::uint32_t> mask);
  bool push_step(const std::vector<std::int32_t>& kernel, bool terminated);

  std::shared_ptr<const CompiledGrammar> grammar_;
  Pda pda_;
  std::vector<Step> steps_;
  std::vector<std::int32_t> kernels_;  // the kernels of all steps, back to back
  // Scratch for mask computation.
  std::vector<std::int32_t> heads_;
  std::vector<std::int32_t> kernel_;
  std::vector<std::int32_t> next_kernel_;
  std::vector<std::vector<std::int32_t>> levels_;
  std::vector<std::vector<StackNode>> ready_;
  std::vector<std::uint8_t> ready_valid_;
  std::vector<std::size_t> marks_;
};

// Fills one bitmask row per matcher (rows of bitmask_words words) on the pool while the caller
// does other work; rows of null matchers are left untouched.
void fill_next_token_bitmasks(std::span<Matcher* const> matchers, std::span<std::uint32_t> bitmask,
                              int bitmask_words, ThreadPool* pool);

// Sets logits of disallowed tokens to -inf. Logits past the bitmask's width are disallowed too.
void apply_token_bitmask(std::span<float> logits, std::span<const std::uint32_t> bitmask);

}  // namespace deepinfer::grammar
