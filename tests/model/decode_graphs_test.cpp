// The decode-step graph cache (model/deepseek_v4/decode_graphs.h) with fake graphs: warm-up then
// capture then replays, recapture when a step address moves, a failed capture that keeps only its
// bucket eager, least-recently-used eviction, and graphs dropped when shared memory is replaced
// (releasing what they kept alive). Needs no GPU.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/deepseek_v4/decode_graphs.h"

namespace deepinfer::model::v4 {
namespace {

// A "graph" that counts its replays.
class CountingExec final : public ops::detail::GraphExec {
 public:
  explicit CountingExec(int* replays) : replays_(replays) {}
  void replay() override { ++*replays_; }
  std::size_t num_nodes() const override { return 1; }

 private:
  int* replays_;
};

// Captures by running the body in "recording" mode; refuses buckets listed in `refuse`.
struct FakeGpu {
  int eager_runs = 0, recorded_runs = 0, replays = 0;
  bool recording = false;
  std::vector<DecodeBucket> refuse;
  const void* shared = &shared_a;  // what the "scratch" is now
  static inline const int shared_a = 1, shared_b = 2;

  DecodeGraphs cache(std::size_t capacity = DecodeGraphs::kDefaultCapacity) {
    return DecodeGraphs(
        [this](const std::function<void()>& body) {
          recording = true;
          try {
            body();
          } catch (...) {
            recording = false;  // as ops::capture_graph aborts the capture
            throw;
          }
          recording = false;
          return ops::Graph(std::make_unique<CountingExec>(&replays));
        },
        capacity);
  }

  // A step of `bucket` whose per-bucket address is `address`; the graph keeps `memory` alive.
  DecodeGraphs::Step step(DecodeBucket bucket, const void* address, std::shared_ptr<const void> memory = nullptr) {
    DecodeGraphs::Step s;
    s.bucket = bucket;
    s.addresses = [this, address] { return DecodeAddresses{{address}, {shared}}; };
    s.body = [this, bucket] {
      for (const DecodeBucket& b : refuse)
        if (recording && b == bucket) throw_error("capture refused for bucket {}", bucket.rows);
      ++(recording ? recorded_runs : eager_runs);
    };
    s.keep_alive = [memory](ops::Graph& g) {
      if (memory) g.keep_alive(memory);
    };
    return s;
  }
};

const int kMeta1 = 1, kMeta2 = 2;

TEST(DecodeGraphs, WarmsUpCapturesThenReplaysABucket) {
  FakeGpu gpu;
  DecodeGraphs cache = gpu.cache();
  EXPECT_EQ(cache.run(gpu.step({4, 8}, &kMeta1)), DecodeGraphs::Ran::kCaptured);
  EXPECT_EQ(gpu.eager_runs, 1);     // the warm-up step ran the work
  EXPECT_EQ(gpu.recorded_runs, 1);  // and the capture recorded it
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cache.run(gpu.step({4, 8}, &kMeta1)), DecodeGraphs::Ran::kReplayed);
  EXPECT_EQ(gpu.eager_runs, 1);
  EXPECT_EQ(gpu.replays, 3);
  EXPECT_EQ(cache.replays(), 3);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DecodeGraphs, RecapturesABucketWhoseStepAddressMoved) {
  FakeGpu gpu;
  DecodeGraphs cache = gpu.cache();
  auto old_memory = std::make_shared<int>(1);
  std::weak_ptr<int> watch = old_memory;
  cache.run(gpu.step({1, 2}, &kMeta1, std::move(old_memory)));
  EXPECT_EQ(cache.run(gpu.step({1, 2}, &kMeta2)), DecodeGraphs::Ran::kCaptured);
  EXPECT_TRUE(watch.expired()) << "the replaced graph still holds its memory";
  EXPECT_EQ(cache.run(gpu.step({1, 2}, &kMeta2)), DecodeGraphs::Ran::kReplayed);
  EXPECT_EQ(cache.captures(), 2);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(DecodeGraphs, FailedCaptureKeepsOnlyItsBucketEager) {
  FakeGpu gpu;
  gpu.refuse = {{2, 4}};
  DecodeGraphs cache = gpu.cache();
  EXPECT_EQ(cache.run(gpu.step({2, 4}, &kMeta1)), DecodeGraphs::Ran::kEager);
  EXPECT_TRUE(cache.failed({2, 4}));
  EXPECT_EQ(gpu.eager_runs, 1);  // the step itself still ran
  const int recorded = gpu.recorded_runs;
  EXPECT_EQ(cache.run(gpu.step({2, 4}, &kMeta1)), DecodeGraphs::Ran::kEager);
  EXPECT_EQ(gpu.recorded_runs, recorded) << "a failed bucket was captured again";
  EXPECT_EQ(gpu.eager_runs, 2);
  // Other buckets still get graphs.
  EXPECT_EQ(cache.run(gpu.step({4, 4}, &kMeta1)), DecodeGraphs::Ran::kCaptured);
  EXPECT_EQ(cache.run(gpu.step({4, 4}, &kMeta1)), DecodeGraphs::Ran::kReplayed);
  EXPECT_FALSE(cache.failed({4, 4}));
  cache.clear();  // set_graphs(false): failures are forgotten with the graphs
  EXPECT_FALSE(cache.failed({2, 4}));
}

TEST(DecodeGraphs, EvictsTheLeastRecentlyUsedGraphBeyondItsCapacity) {
  FakeGpu gpu;
  DecodeGraphs cache = gpu.cache(2);
  auto b_memory = std::make_shared<int>(2);
  std::weak_ptr<int> b_watch = b_memory;
  cache.run(gpu.step({1, 1}, &kMeta1));
  cache.run(gpu.step({2, 1}, &kMeta1, std::move(b_memory)));
  EXPECT_EQ(cache.run(gpu.step({1, 1}, &kMeta1)), DecodeGraphs::Ran::kReplayed);  // A is now newer than B
  EXPECT_EQ(cache.run(gpu.step({4, 1}, &kMeta1)), DecodeGraphs::Ran::kCaptured);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.cached({1, 1}));
  EXPECT_FALSE(cache.cached({2, 1}));
  EXPECT_TRUE(cache.cached({4, 1}));
  EXPECT_TRUE(b_watch.expired()) << "the evicted graph still holds its memory";
  EXPECT_EQ(cache.evictions(), 1);
  // The evicted bucket is captured again when it comes back; a smaller capacity evicts at once.
  EXPECT_EQ(cache.run(gpu.step({2, 1}, &kMeta1)), DecodeGraphs::Ran::kCaptured);
  cache.set_capacity(1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.cached({2, 1}));
  EXPECT_THROW(cache.set_capacity(0), Error);
}

TEST(DecodeGraphs, DropsGraphsHoldingReplacedSharedMemory) {
  FakeGpu gpu;
  DecodeGraphs cache = gpu.cache();
  auto old_scratch = std::make_shared<int>(3);
  std::weak_ptr<int> watch = old_scratch;
  cache.run(gpu.step({1, 1}, &kMeta1, old_scratch));
  cache.run(gpu.step({2, 1}, &kMeta1, old_scratch));
  old_scratch.reset();
  EXPECT_FALSE(watch.expired());
  gpu.shared = &FakeGpu::shared_b;  // the backend's scratch grew (a larger step ran eagerly)
  EXPECT_EQ(cache.run(gpu.step({4, 1}, &kMeta1)), DecodeGraphs::Ran::kCaptured);
  EXPECT_EQ(cache.size(), 1u) << "graphs captured with the old scratch were kept";
  EXPECT_TRUE(watch.expired()) << "the old scratch is still pinned by stale graphs";
  EXPECT_EQ(cache.run(gpu.step({1, 1}, &kMeta1)), DecodeGraphs::Ran::kCaptured);  // recaptured on its next use
  EXPECT_EQ(cache.run(gpu.step({1, 1}, &kMeta1)), DecodeGraphs::Ran::kReplayed);
}

TEST(DecodeGraphs, SharedMemoryReplacedDuringTheWarmUpIsTheOneTheNewGraphKeeps) {
  FakeGpu gpu;
  DecodeGraphs cache = gpu.cache();
  cache.run(gpu.step({1, 1}, &kMeta1));
  DecodeGraphs::Step grow = gpu.step({8, 1}, &kMeta1);
  const auto eager = grow.body;
  grow.body = [&gpu, eager] {
    eager();
    gpu.shared = &FakeGpu::shared_b;  // the warm-up grew the scratch
  };
  EXPECT_EQ(cache.run(grow), DecodeGraphs::Ran::kCaptured);
  EXPECT_FALSE(cache.cached({1, 1}));
  EXPECT_EQ(cache.run(grow), DecodeGraphs::Ran::kReplayed) << "the new graph was keyed by the pre-warm-up scratch";
}

}  // namespace
}  // namespace deepinfer::model::v4
