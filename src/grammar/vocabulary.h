// The model's vocabulary as the grammar matcher sees it: token id -> byte string, which ids are
// special (never allowed) and which end generation, plus a byte trie over the normal tokens that
// the mask computation walks. Built from any source (tokenizer library, tokenizer.json, tests).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// Byte families the token-cache walk can accept wholesale (see Automaton::run_depth): printable
// ASCII except quote and backslash (JSON string text), word characters with '-', alphanumerics with
// '-' (hostnames), alphanumerics, hex digits, digits.
inline constexpr int kNumByteFamilies = 6;
const ByteSet& byte_family(int f);

// A byte trie over the sorted non-special tokens, laid out in preorder so a subtree is a contiguous
// node range and its tokens a contiguous range of sorted_ids().
class TokenTrie {
 public:
  struct Node {
    std::int32_t subtree_end = 0;  // one past the last node of this subtree
    std::int32_t tok_lo = 0;       // sorted-token range of this subtree: [tok_lo, tok_hi)
    std::int32_t tok_hi = 0;
    std::int32_t exact_end = 0;    // tokens equal to this prefix: [tok_lo, exact_end)
    std::uint16_t depth = 0;
    std::uint8_t byte = 0;         // the byte on the edge into this node
    std::uint8_t height = 0;       // longest path below this node (capped at 255)
  };

  explicit TokenTrie(const std::vector<std::string>& tokens, const std::vector<std::uint8_t>& excluded);
  const std::vector<Node>& nodes() const { return nodes_; }
  // Bytes on edges strictly below node i.
  const ByteSet& below(std::int32_t i) const { return below_[i]; }
  // Bit f set when below(i) lies within byte_family(f).
  std::uint8_t families(std::int32_t i) const { return families_[i]; }
  // True when every token below node i continues from it with complete UTF-8 characters that a
  // JSON string may hold unescaped; text_chars(i) is then the most such characters below i.
  bool text_ok(std::int32_t i) const { return text_ok_[i] != 0; }
  int text_chars(std::int32_t i) const { return text_chars_[i]; }
  const std::vector<std::int32_t>& sorted_ids() const { return sorted_ids_; }
  // Position of a token id in sorted_ids(), or -1 for excluded tokens.
  std::int32_t rank_of(std::int32_t id) const { return rank_[id]; }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<ByteSet> below_;
  std::vector<std::uint8_t> families_;
  std::vector<std::uint8_t> text_ok_;
  std::vector<std::uint8_t> text_chars_;
  std::vector<std::int32_t> sorted_ids_;
  std::vector<std::int32_t> rank_;
  int max_depth_ = 0;
};

class Vocabulary {
 public:
  // token_bytes[i] is the byte string of token i; ids in [token_bytes.size(), vocab_size) exist in
  // the logits but not in the tokenizer and are never allowed. Special ids and tokens with empty
  // bytes are never allowed; end_ids are allowed exactly when the grammar may stop.
  Vocabulary(std::vector<std::string> token_bytes, int vocab_size, std::vector<std::int32_t> special_ids,
             std::vector<std::int32_t> end_ids);

  // A Hugging Face tokenizer.json of a byte-level BPE model. Added tokens are special. End ids come
  // from end_ids, else from the eos_token of tokenizer_config.json next to it. vocab_size 0 means
  // max id + 1.
  static std::shared_ptr<const Vocabulary> load_hf_tokenizer_json(const std::string& path, int vocab_size = 0,
                                                                  std::vector<std::int32_t> end_ids = {});

  int size() const { return vocab_size_; }
  int bitmask_words() const { return (vocab_size_ + 31) / 32; }
  int num_tokens() const { return static_cast<int>(tokens_.size()); }
  const std::string& token_bytes(std::int32_t id) const { return tokens_[id]; }
  bool is_excluded(std::int32_t id) const { return id >= num_tokens() || excluded_[id] != 0; }
  std::span<const std::int32_t> end_ids() const { return end_ids_; }
  bool is_end(std::int32_t id) const;
  const TokenTrie& trie() const { return *trie_; }

 private:
  int vocab_size_ = 0;
  std::vector<std::string> tokens_;
  std::vector<std::uint8_t> excluded_;
  std::vector<std::int32_t> end_ids_;
  std::unique_ptr<TokenTrie> trie_;
};

}  // namespace deepinfer::grammar
