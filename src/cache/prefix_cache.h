// Prefix cache: a tree of full pages keyed by a hash chain over their token ids, so requests that
// share a prompt prefix reuse its pages. For models with fixed per-sequence state (V4's window
// ring and compressor partial groups) a page boundary is resumable only if a snapshot of that
// state at the boundary is attached to the page (docs/ENGINE.md, "Prefix cache").
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"

namespace deepinfer::cache {

// Hash of the chain root: the model identity, page size and a per-request extra key (cache salt,
// adapter id, ...) so different models or salts never share pages.
std::uint64_t prefix_root_hash(std::string_view model_identity, std::int32_t page_size, std::uint64_t extra_key);
// Hash of one full page given its parent's hash.
std::uint64_t prefix_page_hash(std::uint64_t parent_hash, std::span<const std::int32_t> page_tokens);

struct PrefixCacheStats {
  std::int64_t queries = 0;       // lookups made (one per admission of a sequence)
  std::int64_t hits = 0;          // lookups that reused at least one page
  std::int64_t query_tokens = 0;  // tokens of the sequences looked up
  std::int64_t hit_tokens = 0;    // tokens served from cached pages
  std::int64_t inserted_pages = 0;
  std::int64_t evicted_pages = 0;
  std::int64_t snapshots_attached = 0;
  double token_hit_rate() const {
    return query_tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(query_tokens);
  }
};

// The outcome of a lookup. The caller owns one reference on every page and on the snapshot.
struct PrefixMatch {
  std::vector<std::int32_t> pages;  // pages[i] holds tokens [i * page_size, (i + 1) * page_size)
  std::int32_t snapshot = -1;       // fixed state at the end of the last page; -1 if none needed
  std::int32_t last_node = -1;      // node id to pass as `parent` when inserting the next page
};

class PrefixCache {
 public:
  // `snapshots` may be null when the model has no fixed state (any page boundary is resumable).
  PrefixCache(std::int32_t page_size, BlockPool& pages, BlockPool* snapshots);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool needs_snapshots() const { return snapshots_ != nullptr; }

  // Longest resumable chain for a sequence whose full-page hashes are `page_hashes` (at most
  // `max_pages` of them are used; `tokens` are the sequence's tokens, compared exactly so a hash
  // collision can never return a wrong page). The caller releases the references if it does not
  // use the match, and records the lookup in the stats once it does (record_query).
  PrefixMatch match(std::uint64_t extra_key, std::span<const std::uint64_t> page_hashes,
                    std::span<const std::int32_t> tokens, std::int32_t max_pages);
  void record_query(std::int64_t query_tokens, std::int64_t hit_tokens);

  // Registers `page` (in use by the caller) as holding `page_tokens` after the chain ending at
  // node `parent` (-1 for the first page) whose hash is `parent_hash` (checked, since a node id
  // is a page id and is reused after eviction). Returns the node id that now represents this chain
  // position, to be passed as `parent` for the next page: `page` itself, an existing node with
  // identical content (the caller's page then stays private), or -1 if the position cannot be
  // registered (hash collision, or the parent was evicted meanwhile) — stop registering then.
  std::int32_t insert(std::int32_t parent, std::uint64_t parent_hash, std::uint64_t extra_key,
                      std::uint64_t hash, std::span<const std::int32_t> page_tokens, std::int32_t page);

  // Attaches snapshot slot `snapshot` (in use by the caller) to node `node` with hash
  // `node_hash`: it holds the fixed state at the end of that node's page. Returns false (nothing
  // changes) if the node is gone or already has one.
  bool attach_snapshot(std::int32_t node, std::uint64_t node_hash, std::int32_t snapshot);

  bool contains_node(std::int32_t node) const;
  std::int32_t num_nodes() const { return static_cast<std::int32_t>(by_hash_.size()); }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Node {
    bool valid = false;
    std::uint64_t hash = 0;
    std::uint64_t extra_key = 0;  // exact root key for first pages
    std::int32_t parent = -1;
    std::int32_t snapshot = -1;
    std::vector<std::int32_t> tokens;
    std::vector<std::int32_t> children;
  };

  std::int32_t find(std::int32_t parent, std::uint64_t extra_key, std::uint64_t hash,
                    std::span<const std::int32_t> page_tokens) const;
  // Removes `node` and its subtree from the index (pages and snapshots become plain blocks).
  void remove_subtree(std::int32_t node);
  void on_page_evicted(std::int32_t page);
  void on_snapshot_evicted(std::int32_t snapshot);

  std::int32_t page_size_;
  BlockPool& pages_;
  BlockPool* snapshots_;
  std::vector<Node> nodes_;                      // indexed by page id; node id == page id
  std::vector<std::int32_t> snapshot_owner_;     // snapshot slot -> node, -1 if unattached
  std::unordered_map<std::uint64_t, std::int32_t> by_hash_;
  PrefixCacheStats stats_;
};

}  // namespace deepinfer::cache
