// PrefixCache: exact matching over hash chains, reference counts, snapshots, subtree eviction.
#include "cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace deepinfer::cache {
namespace {

constexpr std::int32_t kPage = 4;

// Tokens and chain hashes of a sequence, as the scheduler computes them.
struct Chain {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint64_t> hashes;
  Chain(std::vector<std::int32_t> t, std::uint64_t key = 0) : tokens(std::move(t)) {
    std::uint64_t h = prefix_root_hash("model", kPage, key);
    for (std::size_t i = 0; i + kPage <= tokens.size(); i += kPage) {
      h = prefix_page_hash(h, std::span(tokens).subspan(i, kPage));
      hashes.push_back(h);
    }
  }
  std::span<const std::int32_t> page(std::size_t k) const { return std::span(tokens).subspan(k * kPage, kPage); }
};

std::vector<std::int32_t> iota_tokens(std::int32_t n, std::int32_t start = 0) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Allocates pages for `chain` and registers all of them; returns the page ids (still held).
std::vector<std::int32_t> insert_chain(PrefixCache& cache, BlockPool& pool, const Chain& chain, std::uint64_t key = 0) {
  std::vector<std::int32_t> pages;
  std::int32_t parent = -1;
  for (std::size_t k = 0; k < chain.hashes.size(); ++k) {
    const std::int32_t page = pool.allocate();
    pages.push_back(page);
    parent = cache.insert(parent, k == 0 ? 0 : chain.hashes[k - 1], key, chain.hashes[k], chain.page(k), page);
    EXPECT_EQ(parent, page);
  }
  return pages;
}

TEST(PrefixCache, MatchesTheLongestRegisteredPrefixAndTakesReferences) {
  BlockPool pool(8);
  PrefixCache cache(kPage, pool, nullptr);
  const Chain a(iota_tokens(12));
  const std::vector<std::int32_t> pages = insert_chain(cache, pool, a);
  for (std::int32_t p : pages) pool.decref(p);  // the writer finished: pages become cached-free
  EXPECT_EQ(pool.num_cached_free(), 3);

  std::vector<std::int32_t> b_tokens = iota_tokens(12);
  b_tokens[9] = 99;  // diverges in the third page
  const Chain b(b_tokens);
  const PrefixMatch m = cache.match(0, b.hashes, b.tokens, 3);
  EXPECT_EQ(m.pages, (std::vector<std::int32_t>{pages[0], pages[1]}));
  EXPECT_EQ(m.snapshot, -1);
  EXPECT_EQ(m.last_node, pages[1]);
  EXPECT_EQ(pool.refcount(pages[0]), 1);
  EXPECT_EQ(pool.refcount(pages[2]), 0);
  EXPECT_EQ(pool.num_cached_free(), 1);
}

TEST(PrefixCache, MaxPagesLimitsTheMatch) {
  BlockPool pool(8);
  PrefixCache cache(kPage, pool, nullptr);
  const Chain a(iota_tokens(12));
  insert_chain(cache, pool, a);
  EXPECT_EQ(cache.match(0, a.hashes, a.tokens, 2).pages.size(), 2u);
  EXPECT_EQ(cache.match(0, a.hashes, a.tokens, 0).pages.size(), 0u);
}

TEST(PrefixCache, ExtraKeySeparatesOtherwiseEqualPrefixes) {
  BlockPool pool(8);
  PrefixCache cache(kPage, pool, nullptr);
  const Chain salted(iota_tokens(8), 7);
  insert_chain(cache, pool, salted, 7);
  const Chain plain(iota_tokens(8), 0);
  EXPECT_TRUE(cache.match(0, plain.hashes, plain.tokens, 2).pages.empty());
  // Even with the salted hashes, a different root key does not match.
  EXPECT_TRUE(cache.match(0, salted.hashes, salted.tokens, 2).pages.empty());
  EXPECT_EQ(cache.match(7, salted.hashes, salted.tokens, 2).pages.size(), 2u);
}

TEST(PrefixCache, AHashCollisionNeverReturnsAWrongPage) {
  BlockPool pool(8);
  PrefixCache cache(kPage, pool, nullptr);
  const Chain a(iota_tokens(4));
  insert_chain(cache, pool, a);
  // Different tokens presented with a's hash (a forged collision).
  const std::vector<std::int32_t> other = iota_tokens(4, 50);
  EXPECT_TRUE(cache.match(0, a.hashes, other, 1).pages.empty());
  const std::int32_t page = pool.allocate();
  EXPECT_EQ(cache.insert(-1, 0, 0, a.hashes[0], other, page), -1);
  EXPECT_FALSE(pool.is_cached(page));
}

TEST(PrefixCache, DuplicateContentReturnsTheExistingNode) {
  BlockPool pool(8);
  PrefixCache cache(kPage, pool, nullptr);
  const Chain a(iota_tokens(4));
  const std::vector<std::int32_t> first = insert_chain(cache, pool, a);
  const std::int32_t page = pool.allocate();
  EXPECT_EQ(cache.insert(-1, 0, 0, a.hashes[0], a.page(0), page), first[0]);
  EXPECT_FALSE(pool.is_cached(page));  // the duplicate stays private
  EXPECT_EQ(cache.num_nodes(), 1);
}

TEST(PrefixCache, MatchStopsAtTheDeepestSnapshotWhenStateIsNeeded) {
  BlockPool pool(8), snapshots(4);
  PrefixCache cache(kPage, pool, &snapshots);
  const Chain a(iota_tokens(12));
  const std::vector<std::int32_t> pages = insert_chain(cache, pool, a);
  EXPECT_TRUE(cache.match(0, a.hashes, a.tokens, 3).pages.empty());  // no resumable boundary yet
  const std::int32_t snap = snapshots.allocate();
  EXPECT_TRUE(cache.attach_snapshot(pages[1], a.hashes[1], snap));
  EXPECT_FALSE(cache.attach_snapshot(pages[1], a.hashes[1], snap));  // already has one
  EXPECT_FALSE(cache.attach_snapshot(pages[2], a.hashes[1], snap));  // wrong hash for that node
  snapshots.decref(snap);
  EXPECT_EQ(snapshots.num_cached_free(), 1);
  const PrefixMatch m = cache.match(0, a.hashes, a.tokens, 3);
  EXPECT_EQ(m.pages.size(), 2u);
  EXPECT_EQ(m.snapshot, snap);
  EXPECT_EQ(snapshots.refcount(snap), 1);
}

TEST(PrefixCache, EvictingAPageRemovesItsWholeSubtree) {
  BlockPool pool(3), snapshots(2);
  PrefixCache cache(kPage, pool, &snapshots);
  const Chain a(iota_tokens(12));
  const std::vector<std::int32_t> pages = insert_chain(cache, pool, a);
  const std::int32_t snap = snapshots.allocate();
  ASSERT_TRUE(cache.attach_snapshot(pages[2], a.hashes[2], snap));
  snapshots.decref(snap);
  // Free the head first so it is the least recently used, then the rest.
  pool.decref(pages[0]);
  pool.decref(pages[2]);
  pool.decref(pages[1]);
  EXPECT_EQ(pool.allocate(), pages[0]);  // evicts the root page ...
  EXPECT_EQ(cache.num_nodes(), 0);       // ... and with it both descendants
  EXPECT_EQ(pool.num_cached_free(), 0);
  EXPECT_EQ(pool.num_available(), 2);
  EXPECT_EQ(snapshots.num_cached_free(), 0);  // the subtree's snapshot is a plain free slot again
  EXPECT_EQ(snapshots.num_available(), 2);
  EXPECT_EQ(cache.stats().evicted_pages, 3);
}

TEST(PrefixCache, EvictedSnapshotMakesItsBoundaryUnresumable) {
  BlockPool pool(4), snapshots(1);
  PrefixCache cache(kPage, pool, &snapshots);
  const Chain a(iota_tokens(4));
  const std::vector<std::int32_t> pages = insert_chain(cache, pool, a);
  const std::int32_t snap = snapshots.allocate();
  ASSERT_TRUE(cache.attach_snapshot(pages[0], a.hashes[0], snap));
  snapshots.decref(snap);
  EXPECT_EQ(snapshots.allocate(), snap);  // recycled for someone else
  EXPECT_TRUE(cache.match(0, a.hashes, a.tokens, 1).pages.empty());
  EXPECT_TRUE(cache.contains_node(pages[0]));  // the page itself is still cached
}

TEST(PrefixCache, InsertUnderAnEvictedParentIsRefused) {
  BlockPool pool(2);
  PrefixCache cache(kPage, pool, nullptr);
  const Chain a(iota_tokens(8));
  const std::int32_t p0 = pool.allocate();
  ASSERT_EQ(cache.insert(-1, 0, 0, a.hashes[0], a.page(0), p0), p0);
  pool.decref(p0);
  const std::int32_t other = pool.allocate();
  const std::int32_t reused = pool.allocate();  // evicts p0, reuses its id
  EXPECT_EQ(reused, p0);
  const Chain b(iota_tokens(4, 40));
  ASSERT_EQ(cache.insert(-1, 0, 0, b.hashes[0], b.page(0), reused), reused);  // id p0 now means b's page
  // A writer still chaining under the old p0 must not attach its page to b's node.
  EXPECT_EQ(cache.insert(p0, a.hashes[0], 0, a.hashes[1], a.page(1), other), -1);
}

TEST(PrefixCache, StatsCountQueriesAndHitTokens) {
  BlockPool pool(4);
  PrefixCache cache(kPage, pool, nullptr);
  cache.record_query(10, 0);
  cache.record_query(10, 8);
  EXPECT_EQ(cache.stats().queries, 2);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_DOUBLE_EQ(cache.stats().token_hit_rate(), 0.4);
}

}  // namespace
}  // namespace deepinfer::cache
