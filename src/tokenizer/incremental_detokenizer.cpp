// Streaming decode with the same U+FFFD rule as Tokenizer::decode, applied as bytes arrive.
#include "tokenizer/incremental_detokenizer.h"

#include "common/error.h"
#include "common/utf8.h"

namespace deepinfer::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::size_t IncrementalDetokenizer::push_into(TokenId id, std::string& out) {
  DI_CHECK(tokenizer_->is_valid_id(id), "detokenize: token id {} is not in the vocabulary (size {})", id,
           tokenizer_->vocab_size());
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return 0;
  pending_.append(tokenizer_->token_bytes(id));
  // Everything but a completable tail is final: maximal invalid subparts never change with more
  // bytes, so replacing them now gives what decode() of the whole stream gives.
  const std::size_t keep = utf8::incomplete_tail_length(pending_);
  const std::size_t before = out.size();
  utf8::append_lossy(out, std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out.size() - before;
}

std::string IncrementalDetokenizer::push(TokenId id) {
  std::string out;
  push_into(id, out);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = utf8::to_valid(pending_);
  pending_.clear();
  return out;
}

}  // namespace deepinfer::tokenizer
