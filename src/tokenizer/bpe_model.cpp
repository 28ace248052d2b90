// BPE merges in HF tokenizers' order: repeatedly the pair of lowest rank, leftmost first. Short
// words (almost all) use a scan over a small array; long ones HF's heap with lazy invalidation.
#include "tokenizer/bpe_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <limits>
#include <queue>

#include "common/error.h"
#include "common/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"

namespace deepinfer::tokenizer {
namespace {

constexpr std::uint32_t kNoRank = std::numeric_limits<std::uint32_t>::max();
constexpr std::size_t kSmallWord = 48;        // above this many symbols, the heap pays off
constexpr std::size_t kMaxCachedWord = 256;   // bytes; HF's MAX_LENGTH for its cache
constexpr std::size_t kCacheSlots = 1 << 15;  // 2 MiB of 64-byte slots per thread and model
constexpr std::size_t kMaxLongWords = 1 << 16;

std::atomic<std::uint64_t> next_cache_key{1};

std::pair<std::string, std::string> parse_merge(const nlohmann::json& entry, const std::string& where) {
  if (entry.is_string()) {
    const auto& s = entry.get_ref<const std::string&>();
    const auto space = s.find(' ');
    DI_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
             "{}: merge '{}' is not two tokens separated by one space", where, s);
    return {s.substr(0, space), s.substr(space + 1)};
  }
  DI_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string(),
           "{}: a merge must be \"a b\" or [\"a\", \"b\"], got {}", where, entry.dump());
  return {entry[0].get<std::string>(), entry[1].get<std::string>()};
}

void check_null_or(const nlohmann::json& model, const char* key, const std::string& where, const char* why) {
  const auto it = model.find(key);
  DI_CHECK(it == model.end() || it->is_null(), "{}.{} = {} is not supported ({})", where, key, it->dump(), why);
}

}  // namespace

WordCache::WordCache() : slots_(kCacheSlots) {}

bool WordCache::find(std::string_view word, std::uint64_t hash, std::vector<TokenId>& out) const {
  if (word.size() <= kInlineBytes) {
    const Slot& slot = slots_[hash & (kCacheSlots - 1)];
    if (slot.id_count == 0 || slot.hash != hash || slot.key_length != word.size() ||
        std::memcmp(slot.key, word.data(), word.size()) != 0)
      return false;
    out.insert(out.end(), slot.ids, slot.ids + slot.id_count);
    return true;
  }
  const auto it = long_words_.find(word);
  if (it == long_words_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, std::uint64_t hash, std::span<const TokenId> ids) {
  if (word.size() <= kInlineBytes && ids.size() <= kInlineIds && !ids.empty()) {
    Slot& slot = slots_[hash & (kCacheSlots - 1)];  // direct-mapped: the newest word wins
    slot.hash = hash;
    slot.key_length = static_cast<std::uint8_t>(word.size());
    slot.id_count = static_cast<std::uint8_t>(ids.size());
    std::memcpy(slot.key, word.data(), word.size());
    std::copy(ids.begin(), ids.end(), slot.ids);
    return;
  }
  if (word.size() >= kMaxCachedWord) return;
  if (long_words_.size() >= kMaxLongWords) long_words_.clear();
  long_words_.emplace(std::string(word), std::vector<TokenId>(ids.begin(), ids.end()));
}

WordCache& BpeModel::thread_cache() const {
  // Models come and go (tests load many); a thread keeps caches for its last few.
  thread_local std::vector<std::pair<std::uint64_t, std::unique_ptr<WordCache>>> caches;
  for (auto& [key, cache] : caches)
    if (key == cache_key_) return *cache;
  if (caches.size() >= 4) caches.erase(caches.begin());
  caches.emplace_back(cache_key_, std::make_unique<WordCache>());
  return *caches.back().second;
}

void BpeModel::MergeTable::reserve(std::size_t n) {
  std::size_t capacity = 16;
  while (capacity < n * 2) capacity *= 2;
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  size_ = 0;
}

void BpeModel::MergeTable::insert_or_assign(TokenId left, TokenId right, Merge merge) {
  const std::uint64_t k = key(left, right);
  std::size_t i = (k * 0x9E3779B97F4A7C15ULL) >> 20 & mask_;
  while (slots_[i].key != ~0ULL && slots_[i].key != k) i = (i + 1) & mask_;
  if (slots_[i].key == ~0ULL) ++size_;
  slots_[i] = {k, merge};
}

const BpeModel::Merge* BpeModel::MergeTable::find(TokenId left, TokenId right) const {
  const std::uint64_t k = key(left, right);
  std::size_t i = (k * 0x9E3779B97F4A7C15ULL) >> 20 & mask_;
  while (true) {
    const Slot& slot = slots_[i];
    if (slot.key == k) return &slot.merge;
    if (slot.key == ~0ULL) return nullptr;
    i = (i + 1) & mask_;
  }
}

BpeModel BpeModel::from_json(const nlohmann::json& model, std::string_view where_view) {
  const std::string where(where_view);
  DI_CHECK(model.is_object(), "{}: expected an object", where);
  const auto type = model.find("type");
  if (type != model.end()) {
    DI_CHECK(type->is_string(), "{}.type: expected a string", where);
    DI_CHECK(*type == "BPE", "{}: unsupported tokenizer model type '{}' (only byte-level BPE is supported)", where,
             type->get<std::string>());
  }
  check_null_or(model, "continuing_subword_prefix", where, "not a byte-level BPE option");
  check_null_or(model, "end_of_word_suffix", where, "not a byte-level BPE option");
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
    DI_CHECK(it->is_number() && it->get<double>() == 0.0, "{}.dropout = {} is not supported (sampling BPE)", where,
             it->dump());
  }
  BpeModel bpe;
  bpe.cache_key_ = next_cache_key.fetch_add(1);
  const auto vocab_it = model.find("vocab");
  DI_CHECK(vocab_it != model.end() && vocab_it->is_object(), "{}.vocab: expected an object of token -> id", where);
  bpe.vocab_.reserve(vocab_it->size());
  for (const auto& [token, id_json] : vocab_it->items()) {
    DI_CHECK(id_json.is_number_unsigned() && id_json.get<std::uint64_t>() < (1u << 30),
             "{}.vocab['{}']: expected a token id in [0, 2^30), got {}", where, token, id_json.dump());
    const auto id = id_json.get<TokenId>();
    bpe.vocab_[token] = id;
    if (static_cast<std::size_t>(id) >= bpe.id_to_token_.size()) bpe.id_to_token_.resize(id + 1);
    bpe.id_to_token_[id] = token;
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8::append_code_point(spelled, byte_to_char(static_cast<unsigned char>(b)));
    const auto it = bpe.vocab_.find(spelled);
    bpe.byte_id_[b] = it == bpe.vocab_.end() ? -1 : it->second;
  }
  const auto merges_it = model.find("merges");
  DI_CHECK(merges_it != model.end() && merges_it->is_array(), "{}.merges: expected an array", where);
  bpe.merges_.reserve(merges_it->size());
  for (std::size_t rank = 0; rank < merges_it->size(); ++rank) {
    const std::string entry_where = fmt::format("{}.merges[{}]", where, rank);
    const auto [left, right] = parse_merge((*merges_it)[rank], entry_where);
    const auto lookup = [&](const std::string& token) {
      const auto it = bpe.vocab_.find(token);
      DI_CHECK(it != bpe.vocab_.end(), "{}: token '{}' is not in the vocabulary", entry_where, token);
      return it->second;
    };
    // Like HF, a later duplicate of a pair replaces the earlier rank.
    const TokenId left_id = lookup(left);
    const TokenId right_id = lookup(right);
    const TokenId merged_id = lookup(left + right);
    bpe.merges_.insert_or_assign(left_id, right_id, Merge{static_cast<std::uint32_t>(rank), merged_id});
  }
  if (const auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    DI_CHECK(it->is_string(), "{}.unk_token: expected a string or null", where);
    const auto unk = bpe.vocab_.find(it->get<std::string>());
    DI_CHECK(unk != bpe.vocab_.end(), "{}.unk_token '{}' is not in the vocabulary", where, it->get<std::string>());
    bpe.unk_id_ = unk->second;
  }
  bpe.fuse_unk_ = json_bool(model, "fuse_unk", false, where);
  bpe.byte_fallback_ = json_bool(model, "byte_fallback", false, where);
  bpe.ignore_merges_ = json_bool(model, "ignore_merges", false, where);
  if (bpe.ignore_merges_) {  // only then are whole words looked up by their bytes
    bpe.bytes_to_id_.reserve(bpe.vocab_.size());
    for (const auto& [token, id] : bpe.vocab_)
      if (auto bytes = byte_level_to_bytes(token)) bpe.bytes_to_id_.emplace(std::move(*bytes), id);
  }
  return bpe;
}

// One symbol per byte (HF: per character of the byte-level spelling), with HF's fallbacks for a
// byte whose character is not in the vocabulary: <0xXX> tokens, then the unknown token, else
// the byte is dropped.
void BpeModel::initial_symbols(std::string_view word, std::vector<TokenId>& symbols) const {
  symbols.clear();
  TokenId pending_unk = -1;  // an unknown-token run not yet emitted
  for (const char c : word) {
    const TokenId id = byte_id_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      if (pending_unk >= 0) symbols.push_back(pending_unk);
      pending_unk = -1;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      std::string spelled;
      utf8::append_code_point(spelled, byte_to_char(static_cast<unsigned char>(c)));
      std::vector<TokenId> fallback;
      for (const char sb : spelled) {
        const auto it = vocab_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(sb)));
        if (it == vocab_.end()) break;
        fallback.push_back(it->second);
      }
      if (fallback.size() == spelled.size()) {
        symbols.insert(symbols.end(), fallback.begin(), fallback.end());
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
}

void BpeModel::merge_small(std::vector<TokenId>& symbols) const {
  std::size_t n = symbols.size();
  if (n < 2) return;
  std::uint32_t ranks[kSmallWord];
  TokenId merged[kSmallWord];
  const auto rank_of = [&](std::size_t i) {
    const Merge* m = merges_.find(symbols[i], symbols[i + 1]);
    if (m == nullptr) return kNoRank;
    merged[i] = m->new_id;
    return m->rank;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(i);
  while (true) {
    std::size_t best = 0;
    std::uint32_t best_rank = kNoRank;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    symbols[best] = merged[best];
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      symbols[i] = symbols[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
    if (best + 1 < n) ranks[best] = rank_of(best);
  }
  symbols.resize(n);
}

// HF's Word::merge_all: a min-heap of (rank, position) over a linked list of symbols; entries
// that no longer describe the current neighbours are skipped when popped.
void BpeModel::merge_large(std::vector<TokenId>& symbols) const {
  struct Entry {
    std::uint32_t rank;
    std::uint32_t pos;
    TokenId new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const std::size_t n = symbols.size();
  std::vector<std::int64_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int64_t>(i + 1) : -1;
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  const auto push = [&](std::size_t pos) {
    if (next[pos] < 0) return;
    if (const Merge* m = merges_.find(symbols[pos], symbols[next[pos]]))
      queue.push({m->rank, static_cast<std::uint32_t>(pos), m->new_id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const auto right = static_cast<std::size_t>(next[top.pos]);
    const Merge* m = merges_.find(symbols[top.pos], symbols[right]);
    if (m == nullptr || m->new_id != top.new_id) continue;
    symbols[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = static_cast<std::int64_t>(top.pos);
    if (prev[top.pos] >= 0) push(static_cast<std::size_t>(prev[top.pos]));
    push(top.pos);
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (alive[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode_uncached(std::string_view word, std::vector<TokenId>& out) const {
  thread_local std::vector<TokenId> symbols;
  initial_symbols(word, symbols);
  if (symbols.size() <= kSmallWord) merge_small(symbols);
  else merge_large(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out, WordCache& cache) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = bytes_to_id_.find(word); it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1 && byte_id_[static_cast<unsigned char>(word[0])] >= 0) {
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  const std::uint64_t hash = StringHash{}(word);
  if (cache.find(word, hash, out)) return;
  const std::size_t first = out.size();
  encode_uncached(word, out);
  cache.insert(word, hash, std::span<const TokenId>(out).subspan(first));
}

}  // namespace deepinfer::tokenizer
