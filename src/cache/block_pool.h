// A pool of fixed-size, reference-counted blocks (cache pages, or fixed-state snapshot slots).
// A block whose count drops to zero goes to the free list, or, if it holds cached content (the
// prefix cache marked it), to an LRU list from which it is evicted only when no plain free block
// is left; reviving a cached block (incref at zero) takes it out of the LRU.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace deepinfer::cache {

class BlockPool {
 public:
  explicit BlockPool(std::int32_t num_blocks);

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(refcount_.size()); }
  // Blocks an allocation can obtain now: plain free ones plus evictable cached ones.
  std::int32_t num_available() const { return static_cast<std::int32_t>(free_.size()) + num_lru_; }
  std::int32_t num_cached_free() const { return num_lru_; }
  std::int32_t num_in_use() const { return num_blocks() - num_available(); }

  // A block with refcount 1; takes a plain free block first, else evicts the least recently used
  // cached one (telling the eviction hook). Returns -1 when every block is in use.
  std::int32_t allocate();
  // n blocks appended to `out`, or none (and false) if fewer than n are available.
  bool allocate(std::int32_t n, std::vector<std::int32_t>& out);

  // Adds a reference. A cached block at refcount 0 is revived (leaves the LRU).
  void incref(std::int32_t block);
  // Drops a reference; at zero the block becomes free (cached ones join the LRU's recent end).
  void decref(std::int32_t block);
  std::int32_t refcount(std::int32_t block) const { return refcount_[check(block)]; }

  // Marks whether a block's content is registered in a cache (marking needs a live reference).
  // Unmarking a free cached block moves it to the plain free list.
  void set_cached(std::int32_t block, bool cached);
  bool is_cached(std::int32_t block) const { return cached_[check(block)] != 0; }

  // Called with the block id when a cached block is recycled by allocate().
  void set_eviction_hook(std::function<void(std::int32_t)> hook) { on_evict_ = std::move(hook); }

  std::int64_t num_evictions() const { return num_evictions_; }

 private:
  std::size_t check(std::int32_t block) const;
  void lru_push_back(std::int32_t block);
  void lru_remove(std::int32_t block);

  std::vector<std::int32_t> refcount_;
  std::vector<std::uint8_t> cached_;
  std::vector<std::int32_t> free_;  // plain free blocks, used as a stack (lowest ids first)
  // Intrusive doubly-linked LRU of cached blocks at refcount 0: head = least recently used.
  std::vector<std::int32_t> prev_, next_;
  std::vector<std::uint8_t> in_lru_;
  std::int32_t head_ = -1, tail_ = -1, num_lru_ = 0;
  std::int64_t num_evictions_ = 0;
  std::function<void(std::int32_t)> on_evict_;
};

}  // namespace deepinfer::cache
