// Engine-facing constraints over the grammar matcher, and the tokenizer -> Vocabulary adapter.
#include "grammar/engine_constraint.h"

#include <algorithm>

#include "common/error.h"

namespace deepinfer::grammar {

std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const tokenizer::Tokenizer& tok, int vocab_size,
                                                            std::vector<std::int32_t> end_ids) {
  auto n = static_cast<int>(tok.vocab_size());
  DI_CHECK(vocab_size >= n, "grammar: logits width {} is smaller than the tokenizer's {} ids", vocab_size, n);
  std::vector<std::string> tokens(static_cast<std::size_t>(n));
  for (int id = 0; id < n; ++id) {
    if (tok.is_valid_id(id)) tokens[id] = std::string(tok.token_bytes(id));
  }
  std::vector<std::int32_t> excluded;
  for (const auto& added : tok.added_tokens()) excluded.push_back(added.id);
  if (end_ids.empty()) {
    DI_CHECK(tok.special_tokens().eos.has_value(), "grammar: the tokenizer has no eos token; pass end ids");
    end_ids.push_back(*tok.special_tokens().eos);
  }
  return std::make_shared<const Vocabulary>(std::move(tokens), vocab_size, std::move(excluded), std::move(end_ids));
}

TextMarkerGate::TextMarkerGate(std::shared_ptr<const Vocabulary> vocab, std::string marker)
    : vocab_(std::move(vocab)), marker_(std::move(marker)) {
  DI_CHECK(!marker_.empty(), "grammar: the text a constraint starts after must not be empty");
  const int m = static_cast<int>(marker_.size());
  // KMP failure links, then the full transition table (state m: the marker is complete).
  std::vector<int> fail(static_cast<std::size_t>(m) + 1, 0);
  for (int i = 1, k = 0; i < m; ++i) {
    while (k > 0 && marker_[i] != marker_[k]) k = fail[k];
    if (marker_[i] == marker_[k]) ++k;
    fail[i + 1] = k;
  }
  next_.assign(static_cast<std::size_t>(m) * 256, 0);
  for (int state = 0; state < m; ++state) {
    for (int b = 0; b < 256; ++b) {
      int k = state;
      while (k > 0 && static_cast<std::uint8_t>(marker_[k]) != b) k = fail[k];
      next_[state * 256 + b] = static_cast<std::uint8_t>(marker_[k]) == b ? k + 1 : 0;
    }
  }
  allowed_.assign(static_cast<std::size_t>(m), std::vector<std::uint32_t>(vocab_->bitmask_words(), 0u));
  for (std::int32_t id = 0; id < vocab_->num_tokens(); ++id) {
    if (vocab_->token_bytes(id).empty()) continue;  // a hole in the tokenizer's ids
    for (int state = 0; state < m; ++state) {
      if (advance(state, id) != kCrossing) allowed_[state][id >> 5] |= 1u << (id & 31);
    }
  }
}

int TextMarkerGate::advance(int state, std::int32_t token) const {
  const std::string& bytes = vocab_->token_bytes(token);
  const int m = static_cast<int>(marker_.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    state = step(state, static_cast<std::uint8_t>(bytes[i]));
    if (state == m) return i + 1 == bytes.size() ? kComplete : kCrossing;
  }
  return state;
}

ReasoningGatedConstraint::ReasoningGatedConstraint(std::unique_ptr<engine::TokenConstraint> inner,
                                                   std::shared_ptr<const TextMarkerGate> gate)
    : inner_(std::move(inner)), gate_(std::move(gate)) {}

void ReasoningGatedConstraint::fill_next_token_bitmask(std::span<std::uint32_t> bitmask) {
  if (started_) {
    inner_->fill_next_token_bitmask(bitmask);
    return;
  }
  const auto allowed = gate_->allowed(state_);
  std::copy(allowed.begin(), allowed.end(), bitmask.begin());
}

bool ReasoningGatedConstraint::accept_token(std::int32_t token) {
  if (started_) {
    if (!inner_->accept_token(token)) return false;
    history_.push_back({state_, true});
    return true;
  }
  const auto allowed = gate_->allowed(state_);
  if (token < 0 || static_cast<std::size_t>(token >> 5) >= allowed.size() || !((allowed[token >> 5] >> (token & 31)) & 1))
    return false;
  const int next = gate_->advance(state_, token);
  history_.push_back({state_, false});
  if (next == TextMarkerGate::kComplete) {
    started_ = true;
  } else {
    state_ = next;
  }
  return true;
}

void ReasoningGatedConstraint::rollback(int n) {
  DI_CHECK(n >= 0 && n <= static_cast<int>(history_.size()), "grammar: cannot roll back {} tokens", n);
  int inner = 0;
  for (int i = 0; i < n; ++i) {
    const Accepted a = history_.back();
    history_.pop_back();
    if (a.delegated) {
      ++inner;
    } else {
      state_ = a.state_before;
      started_ = false;  // a token of the marker itself (or before it) is undone
    }
  }
  if (inner > 0) inner_->rollback(inner);
}

GrammarConstraintFactory::GrammarConstraintFactory(std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool)
    : compiler_(std::move(vocab), pool) {}

std::shared_ptr<const TextMarkerGate> GrammarConstraintFactory::gate_for(const std::string& marker) const {
  std::lock_guard lock(gates_mutex_);
  auto& gate = gates_[marker];
  // A few markers per model in practice ("</think>"); the table costs ~16 KB per marker byte.
  if (!gate) gate = std::make_shared<const TextMarkerGate>(compiler_.vocab(), marker);
  return gate;
}

std::unique_ptr<engine::TokenConstraint> GrammarConstraintFactory::create(const engine::StructuredOutputArgs& args) const {
  ConstraintSpec spec{parse_constraint_kind(args.schema_type), args.schema, args.disable_any_whitespace};
  std::unique_ptr<engine::TokenConstraint> c = std::make_unique<GrammarConstraint>(compiler_.compile(spec));
  if (!args.start_after.empty()) c = std::make_unique<ReasoningGatedConstraint>(std::move(c), gate_for(args.start_after));
  return c;
}

std::shared_ptr<GrammarConstraintFactory> make_grammar_constraint_factory(const tokenizer::Tokenizer& tok,
                                                                          int vocab_size,
                                                                          std::vector<std::int32_t> end_ids,
                                                                          ThreadPool* pool) {
  return std::make_shared<GrammarConstraintFactory>(vocabulary_from_tokenizer(tok, vocab_size, std::move(end_ids)),
                                                    pool);
}

}  // namespace deepinfer::grammar
