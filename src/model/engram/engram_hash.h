// V4.1 Engram n-gram hashing (MODEL_SPEC B4.7 steps 1-5): token ids -> the 24 table row ids per
// token of each Engram layer, exactly as HF transformers' DeepseekV41NgramHashState computes them.
// Pure function of the token ids, the compressed token map and the config; incremental decode
// needs only the last max_ngram_size - 1 ids before a chunk.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/engram/token_map.h"

namespace deepinfer::model::engram {

// A token id that no n-gram may span (an image-span token); its own slot hashes as padding too.
inline constexpr std::int32_t kDeadToken = -1;

// NumPy default_rng(10007 * layer_id).integers(0, bound, max_ngram_size, int64) * 2 + 1 with
// bound = max(1, (2^63 - 1) // compressed_vocab_size // 2): one odd multiplier per look-back.
std::vector<std::int64_t> hash_multipliers(int layer_id, int max_ngram_size, std::int64_t compressed_vocab_size);

class EngramHasher {
 public:
  // cmap: token id -> compressed id (build_compressed_token_map for a real tokenizer, or any map a
  // tiny model's fixture states); cmap_size: its number of distinct ids. Throws deepinfer::Error
  // when the config has no Engram layers, when config.engram.compressed_vocab_size is stated and
  // differs from cmap_size, or when engram_pad_id is outside the map.
  EngramHasher(const io::ModelConfig& config, std::vector<std::int32_t> cmap, std::int64_t cmap_size);
  EngramHasher(const io::ModelConfig& config, const CompressedTokenMap& map);

  int num_layers() const { return static_cast<int>(layers_.size()); }  // = engram.layer_ids.size()
  int layer_id(int engram_index) const { return layers_.at(static_cast<std::size_t>(engram_index)).layer_id; }
  int columns() const { return columns_; }  // (max_ngram_size - 1) * n_heads = 24 for the release
  int history_tokens() const { return max_ngram_ - 1; }  // look-back a chunk needs (3)
  std::int64_t compressed_id(std::int32_t token) const;  // cmap[token], or kDeadToken for kDeadToken
  const std::vector<std::int64_t>& multipliers(int engram_index) const;
  const std::vector<std::int64_t>& primes(int engram_index) const;   // (n-gram, head) order
  const std::vector<std::int64_t>& offsets(int engram_index) const;  // prefix sums of primes

  // Row ids of `tokens` (absolute positions first_position, first_position + 1, ...) for Engram
  // layer `engram_index`, written as int32 [tokens.size(), columns()] into out. `history` holds the
  // ids just before the chunk (positions first_position - history.size() ... first_position - 1);
  // it must cover min(first_position, history_tokens()) positions (extra leading ids are ignored).
  // Token ids must be in the map or be kDeadToken.
  void row_ids(int engram_index, std::span<const std::int32_t> history, std::int64_t first_position,
               std::span<const std::int32_t> tokens, std::span<std::int32_t> out) const;

 private:
  struct Layer {
    int layer_id = 0;
    std::vector<std::int64_t> multipliers, primes, offsets;
  };
  std::vector<std::int32_t> cmap_;
  std::vector<Layer> layers_;
  int max_ngram_ = 0, n_heads_ = 0, columns_ = 0;
  std::int64_t pad_ = 0;  // compressed id of engram_pad_id
};

}  // namespace deepinfer::model::engram
