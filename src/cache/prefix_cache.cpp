// Prefix cache over full pages: hash-chain lookup, exact token verification, subtree eviction.
#include "cache/prefix_cache.h"

#include <algorithm>

#include "cache/hash.h"
#include "common/error.h"

namespace deepinfer::cache {
std::uint64_t prefix_root_hash(std::string_view model_identity, std::int32_t page_size, std::uint64_t extra_key) {
  std::uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the identity, then mixed with the rest
  for (unsigned char c : model_identity) h = (h ^ c) * 0x100000001B3ull;
  h = mix64(h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(page_size)));
  return mix64(h ^ mix64(extra_key));
}

std::uint64_t prefix_page_hash(std::uint64_t parent_hash, std::span<const std::int32_t> page_tokens) {
  std::uint64_t h = mix64(parent_hash ^ 0x5851F42D4C957F2Dull);
  for (std::int32_t t : page_tokens) h = mix64(h ^ static_cast<std::uint32_t>(t));
  return mix64(h ^ page_tokens.size());
}

PrefixCache::PrefixCache(std::int32_t page_size, BlockPool& pages, BlockPool* snapshots)
    : page_size_(page_size), pages_(pages), snapshots_(snapshots) {
  DI_CHECK(page_size >= 1, "prefix cache: page_size {} must be >= 1", page_size);
  nodes_.resize(static_cast<std::size_t>(pages.num_blocks()));
  pages_.set_eviction_hook([this](std::int32_t page) { on_page_evicted(page); });
  if (snapshots_ != nullptr) {
    snapshot_owner_.assign(static_cast<std::size_t>(snapshots_->num_blocks()), -1);
    snapshots_->set_eviction_hook([this](std::int32_t slot) { on_snapshot_evicted(slot); });
  }
}

bool PrefixCache::contains_node(std::int32_t node) const {
  return node >= 0 && static_cast<std::size_t>(node) < nodes_.size() && nodes_[static_cast<std::size_t>(node)].valid;
}

std::int32_t PrefixCache::find(std::int32_t parent, std::uint64_t extra_key, std::uint64_t hash,
                               std::span<const std::int32_t> page_tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const Node& node = nodes_[static_cast<std::size_t>(it->second)];
  // The hash only finds a candidate; equality of parent, root key and tokens makes it a match.
  if (node.parent != parent) return -1;
  if (parent < 0 && node.extra_key != extra_key) return -1;
  if (!std::equal(node.tokens.begin(), node.tokens.end(), page_tokens.begin(), page_tokens.end())) return -1;
  return it->second;
}

PrefixMatch PrefixCache::match(std::uint64_t extra_key, std::span<const std::uint64_t> page_hashes,
                               std::span<const std::int32_t> tokens, std::int32_t max_pages) {
  const auto limit = std::min<std::size_t>(
      {page_hashes.size(), static_cast<std::size_t>(std::max(max_pages, 0)), tokens.size() / static_cast<std::size_t>(page_size_)});
  std::vector<std::int32_t> chain;
  std::size_t resumable = 0;  // chain[0, resumable) ends at a resumable boundary
  std::int32_t parent = -1;
  for (std::size_t i = 0; i < limit; ++i) {
    const auto page_tokens = tokens.subspan(i * static_cast<std::size_t>(page_size_), static_cast<std::size_t>(page_size_));
    const std::int32_t node = find(parent, extra_key, page_hashes[i], page_tokens);
    if (node < 0) break;
    chain.push_back(node);
    if (snapshots_ == nullptr || nodes_[static_cast<std::size_t>(node)].snapshot >= 0) resumable = chain.size();
    parent = node;
  }
  PrefixMatch result;
  result.pages.assign(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(resumable));
  for (std::int32_t page : result.pages) pages_.incref(page);
  if (!result.pages.empty()) {
    result.last_node = result.pages.back();
    if (snapshots_ != nullptr) {
      result.snapshot = nodes_[static_cast<std::size_t>(result.last_node)].snapshot;
      snapshots_->incref(result.snapshot);
    }
  }
  return result;
}

void PrefixCache::record_query(std::int64_t query_tokens, std::int64_t hit_tokens) {
  ++stats_.queries;
  stats_.query_tokens += query_tokens;
  if (hit_tokens > 0) ++stats_.hits;
  stats_.hit_tokens += hit_tokens;
}

std::int32_t PrefixCache::insert(std::int32_t parent, std::uint64_t parent_hash, std::uint64_t extra_key,
                                 std::uint64_t hash, std::span<const std::int32_t> page_tokens, std::int32_t page) {
  DI_CHECK(static_cast<std::int32_t>(page_tokens.size()) == page_size_,
           "prefix cache: insert of {} tokens, a page holds {}", page_tokens.size(), page_size_);
  DI_CHECK(page >= 0 && static_cast<std::size_t>(page) < nodes_.size(), "prefix cache: page id {} out of range", page);
  if (parent >= 0 && (!contains_node(parent) || nodes_[static_cast<std::size_t>(parent)].hash != parent_hash)) {
    return -1;  // the parent was evicted (and its id perhaps reused): this chain is gone
  }
  if (by_hash_.count(hash) != 0) return find(parent, extra_key, hash, page_tokens);
  Node& node = nodes_[static_cast<std::size_t>(page)];
  DI_CHECK(!node.valid, "prefix cache: page {} is already a cache node", page);
  node.valid = true;
  node.hash = hash;
  node.extra_key = extra_key;
  node.parent = parent;
  node.snapshot = -1;
  node.tokens.assign(page_tokens.begin(), page_tokens.end());
  node.children.clear();
  if (parent >= 0) nodes_[static_cast<std::size_t>(parent)].children.push_back(page);
  by_hash_.emplace(hash, page);
  pages_.set_cached(page, true);
  ++stats_.inserted_pages;
  return page;
}

bool PrefixCache::attach_snapshot(std::int32_t node, std::uint64_t node_hash, std::int32_t snapshot) {
  DI_CHECK(snapshots_ != nullptr, "prefix cache: snapshot attached but the model has no fixed state");
  if (!contains_node(node)) return false;
  Node& n = nodes_[static_cast<std::size_t>(node)];
  if (n.hash != node_hash || n.snapshot >= 0) return false;
  n.snapshot = snapshot;
  snapshot_owner_[static_cast<std::size_t>(snapshot)] = node;
  snapshots_->set_cached(snapshot, true);
  ++stats_.snapshots_attached;
  return true;
}

void PrefixCache::remove_subtree(std::int32_t root) {
  std::vector<std::int32_t> stack{root};
  while (!stack.empty()) {
    const std::int32_t id = stack.back();
    stack.pop_back();
    Node& node = nodes_[static_cast<std::size_t>(id)];
    if (!node.valid) continue;
    by_hash_.erase(node.hash);
    if (node.snapshot >= 0) {
      snapshot_owner_[static_cast<std::size_t>(node.snapshot)] = -1;
      snapshots_->set_cached(node.snapshot, false);
    }
    for (std::int32_t child : node.children) stack.push_back(child);
    node = Node{};
    pages_.set_cached(id, false);  // a no-op for the evicted page itself (the pool unmarked it)
    ++stats_.evicted_pages;
  }
}

void PrefixCache::on_page_evicted(std::int32_t page) {
  Node& node = nodes_[static_cast<std::size_t>(page)];
  if (!node.valid) return;
  if (node.parent >= 0) {
    auto& siblings = nodes_[static_cast<std::size_t>(node.parent)].children;
    siblings.erase(std::remove(siblings.begin(), siblings.end(), page), siblings.end());
  }
  remove_subtree(page);
}

void PrefixCache::on_snapshot_evicted(std::int32_t slot) {
  std::int32_t& owner = snapshot_owner_[static_cast<std::size_t>(slot)];
  if (owner >= 0) nodes_[static_cast<std::size_t>(owner)].snapshot = -1;
  owner = -1;
}

}  // namespace deepinfer::cache
