// Reference-counted block pool with an LRU of cached free blocks.
#include "cache/block_pool.h"

#include "common/error.h"

namespace deepinfer::cache {

BlockPool::BlockPool(std::int32_t num_blocks) {
  DI_CHECK(num_blocks >= 0, "block pool: num_blocks {} must be >= 0", num_blocks);
  const auto n = static_cast<std::size_t>(num_blocks);
  refcount_.assign(n, 0);
  cached_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  in_lru_.assign(n, 0);
  free_.reserve(n);
  // Stack order: block 0 is handed out first, which keeps test expectations readable.
  for (std::int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::size_t BlockPool::check(std::int32_t block) const {
  DI_CHECK(block >= 0 && block < num_blocks(), "block pool: block id {} outside [0, {})", block, num_blocks());
  return static_cast<std::size_t>(block);
}

std::int32_t BlockPool::allocate() {
  std::int32_t block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (head_ >= 0) {
    block = head_;
    lru_remove(block);
    cached_[static_cast<std::size_t>(block)] = 0;
    ++num_evictions_;
    if (on_evict_) on_evict_(block);
  } else {
    return -1;
  }
  refcount_[static_cast<std::size_t>(block)] = 1;
  return block;
}

bool BlockPool::allocate(std::int32_t n, std::vector<std::int32_t>& out) {
  if (n > num_available()) return false;
  for (std::int32_t i = 0; i < n; ++i) out.push_back(allocate());
  return true;
}

void BlockPool::incref(std::int32_t block) {
  const std::size_t b = check(block);
  if (refcount_[b] == 0) {
    DI_CHECK(in_lru_[b] != 0, "block pool: incref of free block {} that holds no cached content", block);
    lru_remove(block);
  }
  ++refcount_[b];
}

void BlockPool::decref(std::int32_t block) {
  const std::size_t b = check(block);
  DI_CHECK(refcount_[b] > 0, "block pool: decref of free block {}", block);
  if (--refcount_[b] > 0) return;
  if (cached_[b] != 0) {
    lru_push_back(block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::set_cached(std::int32_t block, bool cached) {
  const std::size_t b = check(block);
  if ((cached_[b] != 0) == cached) return;
  // Content is registered while a sequence holds the block, so marking needs a live reference.
  DI_CHECK(!cached || refcount_[b] > 0, "block pool: cannot mark free block {} as cached", block);
  cached_[b] = cached ? 1 : 0;
  if (!cached && refcount_[b] == 0) {
    lru_remove(block);
    free_.push_back(block);
  }
}

void BlockPool::lru_push_back(std::int32_t block) {
  const std::size_t b = static_cast<std::size_t>(block);
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0) {
    next_[static_cast<std::size_t>(tail_)] = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  in_lru_[b] = 1;
  ++num_lru_;
}

void BlockPool::lru_remove(std::int32_t block) {
  const std::size_t b = static_cast<std::size_t>(block);
  const std::int32_t p = prev_[b], n = next_[b];
  if (p >= 0) {
    next_[static_cast<std::size_t>(p)] = n;
  } else {
    head_ = n;
  }
  if (n >= 0) {
    prev_[static_cast<std::size_t>(n)] = p;
  } else {
    tail_ = p;
  }
  prev_[b] = next_[b] = -1;
  in_lru_[b] = 0;
  --num_lru_;
}

}  // namespace deepinfer::cache
