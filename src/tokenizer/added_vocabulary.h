// The added tokens of a tokenizer.json (special and not): found in the input before
// pre-tokenization, leftmost-longest, honouring the single_word / lstrip / rstrip / normalized
// flags exactly as HF's AddedVocabulary does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token.h"
#include "tokenizer/unicode_regex.h"

namespace deepinfer::tokenizer {

// A piece of the input: either text still to pre-tokenize (token empty) or one added token.
struct Segment {
  std::string_view text;
  std::optional<TokenId> token;
};

class AddedVocabulary {
 public:
  AddedVocabulary();
  explicit AddedVocabulary(std::vector<AddedToken> tokens);
  ~AddedVocabulary();
  AddedVocabulary(AddedVocabulary&&) noexcept;
  AddedVocabulary& operator=(AddedVocabulary&&) noexcept;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find(TokenId id) const;

  // Splits text into segments: first on the tokens with normalized=false over the raw text,
  // then on the normalized=true ones inside the remaining pieces (our supported normalizers are
  // the identity, so no normalization happens in between). Appends to out in order.
  // skip_special: leave special tokens' text in place (HF's encode_special_tokens).
  void split(std::string_view text, bool skip_special, std::vector<Segment>& out) const;

 private:
  // A byte trie over token contents for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, std::uint32_t>> children;  // sorted by byte
      std::int32_t token = -1;  // index into tokens_ of the content ending here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() == 1; }
    void insert(std::string_view content, std::int32_t token);
    // Longest content matching at text[pos], as (token index, length).
    std::optional<std::pair<std::int32_t, std::size_t>> longest_at(std::string_view text, std::size_t pos) const;
  };

  void split_with(const Trie& trie, std::string_view text, bool skip_special, std::vector<Segment>& out) const;
  bool is_word_char_before(std::string_view text, std::size_t end) const;
  bool is_word_char_at(std::string_view text, std::size_t pos) const;
  std::size_t whitespace_start_before(std::string_view text, std::size_t end) const;
  std::size_t whitespace_end_after(std::string_view text, std::size_t start) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::int32_t> index_of_id_;  // id -> index into tokens_, -1 if not added
  Trie raw_trie_;
  Trie normalized_trie_;
  // Character classes of the Rust regex crate, for the single_word / lstrip / rstrip flags.
  std::optional<UnicodeRegex> word_char_;
  std::optional<UnicodeRegex> space_char_;
};

}  // namespace deepinfer::tokenizer
