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

ReasoningGatedConstraint::ReasoningGatedConstraint(std::unique_ptr<engine::TokenConstraint> inner,
                                                   std::int32_t think_end_id, int vocab_size)
    : inner_(std::move(inner)), think_end_id_(think_end_id), vocab_size_(vocab_size) {}

void ReasoningGatedConstraint::fill_next_token_bitmask(std::span<std::uint32_t> bitmask) {
  if (started_) {
    inner_->fill_next_token_bitmask(bitmask);
    return;
  }
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  for (int id = 0; id < vocab_size_; ++id) bitmask[id >> 5] |= 1u << (id & 31);
}

bool ReasoningGatedConstraint::accept_token(std::int32_t token) {
  if (started_) {
    if (!inner_->accept_token(token)) return false;
    delegated_.push_back(true);
    return true;
  }
  if (token == think_end_id_) started_ = true;
  delegated_.push_back(false);
  return true;
}

void ReasoningGatedConstraint::rollback(int n) {
  DI_CHECK(n >= 0 && n <= static_cast<int>(delegated_.size()), "grammar: cannot roll back {} tokens", n);
  int inner = 0;
  for (int i = 0; i < n; ++i) {
    if (delegated_.back()) {
      ++inner;
    } else if (started_) {
      started_ = false;  // the end-of-thinking token itself is undone
    }
    delegated_.pop_back();
  }
  if (inner > 0) inner_->rollback(inner);
}

GrammarConstraintFactory::GrammarConstraintFactory(std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool,
                                                   std::optional<std::int32_t> think_end_id)
    : compiler_(std::move(vocab), pool), think_end_id_(think_end_id) {}

std::unique_ptr<engine::TokenConstraint> GrammarConstraintFactory::create(const engine::StructuredOutputArgs& args) const {
  ConstraintSpec spec{parse_constraint_kind(args.schema_type), args.schema};
  std::unique_ptr<engine::TokenConstraint> c = std::make_unique<GrammarConstraint>(compiler_.compile(spec));
  if (think_end_id_) {
    c = std::make_unique<ReasoningGatedConstraint>(std::move(c), *think_end_id_, compiler_.vocab()->size());
  }
  return c;
}

}  // namespace deepinfer::grammar
