// BlockPool: allocation order, reference counts, the LRU of cached free blocks, eviction hook.
#include "cache/block_pool.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace deepinfer::cache {
namespace {

TEST(BlockPool, AllocatesLowestIdsFirstAndRunsOut) {
  BlockPool pool(3);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.num_available(), 0);
  EXPECT_EQ(pool.num_in_use(), 3);
}

TEST(BlockPool, MultiAllocationIsAllOrNothing) {
  BlockPool pool(4);
  std::vector<std::int32_t> out;
  EXPECT_TRUE(pool.allocate(3, out));
  EXPECT_FALSE(pool.allocate(2, out));
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(pool.num_available(), 1);
}

TEST(BlockPool, SharedBlockIsFreedOnlyAtLastReference) {
  BlockPool pool(2);
  const std::int32_t b = pool.allocate();
  pool.incref(b);
  EXPECT_EQ(pool.refcount(b), 2);
  pool.decref(b);
  EXPECT_EQ(pool.num_available(), 1);
  pool.decref(b);
  EXPECT_EQ(pool.num_available(), 2);
  EXPECT_THROW(pool.decref(b), Error);
  EXPECT_THROW(pool.incref(b), Error);  // a plain free block has nothing to revive
}

TEST(BlockPool, CachedFreeBlocksAreEvictedOnlyWhenNoPlainBlockIsLeft) {
  BlockPool pool(3);
  std::vector<std::int32_t> evicted;
  pool.set_eviction_hook([&](std::int32_t b) { evicted.push_back(b); });
  const std::int32_t a = pool.allocate(), b = pool.allocate();
  pool.set_cached(a, true);
  pool.set_cached(b, true);
  pool.decref(a);
  pool.decref(b);
  EXPECT_EQ(pool.num_cached_free(), 2);
  EXPECT_EQ(pool.num_available(), 3);
  EXPECT_EQ(pool.allocate(), 2);  // the plain free block goes first
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(pool.allocate(), a);  // then the least recently freed cached one
  EXPECT_EQ(evicted, std::vector<std::int32_t>{a});
  EXPECT_FALSE(pool.is_cached(a));
  EXPECT_EQ(pool.num_evictions(), 1);
}

TEST(BlockPool, RevivingACachedBlockRefreshesItsRecency) {
  BlockPool pool(2);
  std::vector<std::int32_t> evicted;
  pool.set_eviction_hook([&](std::int32_t b) { evicted.push_back(b); });
  const std::int32_t a = pool.allocate(), b = pool.allocate();
  pool.set_cached(a, true);
  pool.set_cached(b, true);
  pool.decref(a);  // LRU: a
  pool.decref(b);  // LRU: a, b
  pool.incref(a);  // revived: a leaves the LRU
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.num_cached_free(), 1);
  pool.decref(a);  // LRU: b, a
  EXPECT_EQ(pool.allocate(), b);
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_EQ(evicted, (std::vector<std::int32_t>{b, a}));
}

TEST(BlockPool, UncachingAFreeBlockMakesItPlainFree) {
  BlockPool pool(1);
  const std::int32_t a = pool.allocate();
  pool.set_cached(a, true);
  pool.decref(a);
  pool.set_cached(a, false);
  EXPECT_EQ(pool.num_cached_free(), 0);
  bool hook_called = false;
  pool.set_eviction_hook([&](std::int32_t) { hook_called = true; });
  EXPECT_EQ(pool.allocate(), a);
  EXPECT_FALSE(hook_called);
}

TEST(BlockPool, RejectsBadIdsAndCachingFreeBlocks) {
  BlockPool pool(2);
  EXPECT_THROW(pool.incref(5), Error);
  EXPECT_THROW(pool.refcount(-1), Error);
  EXPECT_THROW(pool.set_cached(0, true), Error);  // not in use
}

}  // namespace
}  // namespace deepinfer::cache
