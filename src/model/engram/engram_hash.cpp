// V4.1 Engram row ids: compressed ids with the DEAD / sequence-start padding rule, a rolling XOR of
// odd-multiplied ids per look-back, and one prime-sized bucket per (n-gram size, head).
#include "model/engram/engram_hash.h"

#include <limits>

#include "common/error.h"
#include "model/engram/numpy_rng.h"

namespace deepinfer::model::engram {

std::vector<std::int64_t> hash_multipliers(int layer_id, int max_ngram_size, std::int64_t compressed_vocab_size) {
  DI_CHECK(layer_id >= 0 && max_ngram_size > 0 && compressed_vocab_size > 0,
           "engram hash multipliers: layer {}, max_ngram_size {}, compressed vocab {} must be positive", layer_id,
           max_ngram_size, compressed_vocab_size);
  const std::int64_t bound = std::max<std::int64_t>(1, std::numeric_limits<std::int64_t>::max() / compressed_vocab_size / 2);
  auto values = default_rng_integers(10007ull * static_cast<std::uint64_t>(layer_id), 0, bound,
                                     static_cast<std::size_t>(max_ngram_size));
  for (auto& v : values) v = v * 2 + 1;
  return values;
}

EngramHasher::EngramHasher(const io::ModelConfig& config, const CompressedTokenMap& map)
    : EngramHasher(config, map.ids, map.size) {}

EngramHasher::EngramHasher(const io::ModelConfig& config, std::vector<std::int32_t> cmap, std::int64_t cmap_size)
    : cmap_(std::move(cmap)) {
  const io::EngramConfig& e = config.engram;
  if (e.layer_ids.empty()) throw_error("engram hash: the config has no Engram layers (engram_layer_ids is empty)");
  if (e.max_ngram_size < 2 || e.n_heads < 1)
    throw_error("engram hash: engram_max_ngram_size {} / engram_n_heads {} give no n-gram lookups", e.max_ngram_size,
                e.n_heads);
  if (e.compressed_vocab_size != 0 && e.compressed_vocab_size != cmap_size)
    throw_error("engram hash: the tokenizer-derived compressed vocabulary has {} ids but engram_compressed_vocab_size "
                "is {} (every hash multiplier derives from it)", cmap_size, e.compressed_vocab_size);
  if (cmap_size <= 0) throw_error("engram hash: empty compressed token map");
  for (std::size_t t = 0; t < cmap_.size(); ++t)
    if (cmap_[t] < 0 || cmap_[t] >= cmap_size)
      throw_error("engram hash: compressed token map entry {} = {} is outside [0, {})", t, cmap_[t], cmap_size);
  if (e.pad_token_id < 0 || e.pad_token_id >= static_cast<std::int64_t>(cmap_.size()))
    throw_error("engram hash: engram_pad_id {} is outside the token map ({} ids)", e.pad_token_id, cmap_.size());
  pad_ = cmap_[static_cast<std::size_t>(e.pad_token_id)];
  max_ngram_ = e.max_ngram_size;
  n_heads_ = e.n_heads;
  columns_ = (max_ngram_ - 1) * n_heads_;
  const auto primes = io::engram_bucket_primes(e);
  for (std::size_t i = 0; i < e.layer_ids.size(); ++i) {
    Layer layer;
    layer.layer_id = e.layer_ids[i];
    layer.multipliers = hash_multipliers(layer.layer_id, max_ngram_, cmap_size);
    layer.primes = primes.at(i);
    std::int64_t total = 0;
    for (const auto p : layer.primes) {
      layer.offsets.push_back(total);
      total += p;
    }
    if (total > std::numeric_limits<std::int32_t>::max())
      throw_error("engram hash: layer {} has {} table rows, more than int32 row ids address", layer.layer_id, total);
    layers_.push_back(std::move(layer));
  }
}

std::int64_t EngramHasher::compressed_id(std::int32_t token) const {
  if (token == kDeadToken) return kDeadToken;
  if (token < 0 || static_cast<std::size_t>(token) >= cmap_.size())
    throw_error("engram hash: token id {} is outside the compressed token map ({} ids)", token, cmap_.size());
  return cmap_[static_cast<std::size_t>(token)];
}

const std::vector<std::int64_t>& EngramHasher::multipliers(int engram_index) const {
  return layers_.at(static_cast<std::size_t>(engram_index)).multipliers;
}
const std::vector<std::int64_t>& EngramHasher::primes(int engram_index) const {
  return layers_.at(static_cast<std::size_t>(engram_index)).primes;
}
const std::vector<std::int64_t>& EngramHasher::offsets(int engram_index) const {
  return layers_.at(static_cast<std::size_t>(engram_index)).offsets;
}

void EngramHasher::row_ids(int engram_index, std::span<const std::int32_t> history, std::int64_t first_position,
                           std::span<const std::int32_t> tokens, std::span<std::int32_t> out) const {
  if (engram_index < 0 || engram_index >= num_layers())
    throw_error("engram hash: Engram layer index {} outside [0, {})", engram_index, num_layers());
  if (first_position < 0) throw_error("engram hash: negative first position {}", first_position);
  const auto needed = static_cast<std::size_t>(std::min<std::int64_t>(first_position, max_ngram_ - 1));
  if (history.size() < needed)
    throw_error("engram hash: a chunk at position {} needs the {} ids before it, got {}", first_position, needed,
                history.size());
  if (out.size() != tokens.size() * static_cast<std::size_t>(columns_))
    throw_error("engram hash: output holds {} ids, {} tokens need {}", out.size(), tokens.size(),
                tokens.size() * static_cast<std::size_t>(columns_));
  const Layer& layer = layers_[static_cast<std::size_t>(engram_index)];
  history = history.subspan(history.size() - needed);
  // Compressed ids of the needed history followed by the chunk: index needed + t is position
  // first_position + t.
  std::vector<std::int64_t> ids;
  ids.reserve(needed + tokens.size());
  for (const auto t : history) ids.push_back(compressed_id(t));
  for (const auto t : tokens) ids.push_back(compressed_id(t));
  std::vector<std::int64_t> x(static_cast<std::size_t>(max_ngram_));
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::int64_t position = first_position + static_cast<std::int64_t>(t);
    // Look-back k reads position - k; the sequence start or a DEAD token blocks it and every
    // further look-back, which then hash the pad token's compressed id.
    bool blocked = false;
    for (int k = 0; k < max_ngram_; ++k) {
      if (!blocked && position < k) blocked = true;
      if (!blocked && ids[needed + t - static_cast<std::size_t>(k)] == kDeadToken) blocked = true;
      x[static_cast<std::size_t>(k)] = blocked ? pad_ : ids[needed + t - static_cast<std::size_t>(k)];
    }
    std::int32_t* row = out.data() + t * static_cast<std::size_t>(columns_);
    // Products cannot overflow: ids < compressed vocab and multipliers < 2^63 / compressed vocab.
    std::int64_t rolling = x[0] * layer.multipliers[0];
    for (int n = 1; n < max_ngram_; ++n) {
      rolling ^= x[static_cast<std::size_t>(n)] * layer.multipliers[static_cast<std::size_t>(n)];
      for (int h = 0; h < n_heads_; ++h) {
        const auto col = static_cast<std::size_t>((n - 1) * n_heads_ + h);
        row[col] = static_cast<std::int32_t>(rolling % layer.primes[col] + layer.offsets[col]);
      }
    }
  }
}

}  // namespace deepinfer::model::engram
