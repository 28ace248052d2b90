// ThreadPool: every index runs exactly once; exceptions reach the caller.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace deepinfer {
namespace {

TEST(ThreadPool, ParallelForVisitsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(hits.size(), [&](std::size_t i) { hits[i]++; });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionsPropagate) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, [](std::size_t i) { if (i == 77) throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_EQ(pool.submit([] { return 41 + 1; }).get(), 42);
}

}  // namespace
}  // namespace deepinfer
