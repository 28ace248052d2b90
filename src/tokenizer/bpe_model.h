// The "BPE" model of a byte-level tokenizer.json: vocabulary, merges by rank, and the merge loop
// that turns one pre-tokenized word (raw bytes) into token ids, with a per-thread word cache.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/token.h"

namespace deepinfer::tokenizer {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

// A per-thread memo of word -> ids for one model. Short words (nearly all) live in a
// direct-mapped table of 64-byte slots, so a lookup touches one cache line; longer ones in a map.
class WordCache {
 public:
  static constexpr std::size_t kInlineBytes = 22;
  static constexpr std::size_t kInlineIds = 8;
  WordCache();
  // Appends the cached ids of word to out and returns true, or returns false.
  bool find(std::string_view word, std::uint64_t hash, std::vector<TokenId>& out) const;
  void insert(std::string_view word, std::uint64_t hash, std::span<const TokenId> ids);

 private:
  struct alignas(64) Slot {
    std::uint64_t hash = 0;
    std::uint8_t key_length = 0;
    std::uint8_t id_count = 0;  // 0: empty
    char key[kInlineBytes];
    TokenId ids[kInlineIds];
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> long_words_;
};

class BpeModel {
 public:
  // model: the "model" value of tokenizer.json; where: its location for error messages.
  static BpeModel from_json(const nlohmann::json& model, std::string_view where);

  // Appends the ids of one word given as raw bytes, memoized in `cache`.
  void encode_word(std::string_view word, std::vector<TokenId>& out, WordCache& cache) const;
  void encode_word(std::string_view word, std::vector<TokenId>& out) const { encode_word(word, out, thread_cache()); }
  // This thread's cache for this model (fetch once per text, not per word).
  WordCache& thread_cache() const;

  // The model's vocabulary as token strings (byte-level spelling), by id; "" where an id is unused.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  const StringIdMap& vocab() const { return vocab_; }

 private:
  struct Merge {
    std::uint32_t rank;
    TokenId new_id;
  };
  // Open-addressing hash table from a packed pair of ids to its merge: the innermost lookup.
  class MergeTable {
   public:
    void reserve(std::size_t n);
    void insert_or_assign(TokenId left, TokenId right, Merge merge);
    const Merge* find(TokenId left, TokenId right) const;

   private:
    static std::uint64_t key(TokenId left, TokenId right) {
      return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
    }
    struct Slot {
      std::uint64_t key = ~0ULL;
      Merge merge{};
    };
    std::vector<Slot> slots_;
    std::size_t mask_ = 0;
    std::size_t size_ = 0;
  };

  void initial_symbols(std::string_view word, std::vector<TokenId>& symbols) const;
  void merge_small(std::vector<TokenId>& symbols) const;
  void merge_large(std::vector<TokenId>& symbols) const;
  void encode_uncached(std::string_view word, std::vector<TokenId>& out) const;

  StringIdMap vocab_;                   // token string -> id, as in the json
  std::vector<std::string> id_to_token_;
  StringIdMap bytes_to_id_;             // raw bytes -> id (built only for ignore_merges)
  std::array<TokenId, 256> byte_id_{};  // id of each single byte, -1 if absent
  MergeTable merges_;
  std::optional<TokenId> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::uint64_t cache_key_ = 0;  // identifies this model's entries in the per-thread word caches
};

}  // namespace deepinfer::tokenizer
