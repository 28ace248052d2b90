// The GPU memory planner's arithmetic and error messages on made-up device numbers, and the device
// names the executor accepts (no GPU needed).
#include "model/memory_plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error.h"
#include "model/executor.h"

namespace deepinfer::model {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// A V4-like cache: compressed KV and index keys at ratio 4, one sliding-window ring per sequence.
cache::CacheSpec plan_spec() {
  cache::CacheSpec spec;
  spec.model_identity = "memory-plan-test";
  spec.paged = {{"layer.0.kv", 0, 4, 584}, {"layer.0.index", 0, 4, 68}};
  spec.fixed = {{"layer.0.window", 0, 128 * 584}};
  return spec;
}

cache::CacheConfig plan_config() {
  cache::CacheConfig c;
  c.page_size = 64;
  c.num_pages = 0;
  c.num_snapshot_slots = 16;
  return c;
}

DeviceMemory h200() { return {"cuda:0 (test H200)", 140 * kGiB, 139 * kGiB}; }

MemoryRequest request(double util, std::int64_t weights, std::int64_t act, std::int64_t other) {
  MemoryRequest r;
  r.gpu_memory_utilization = util;
  r.weight_bytes = weights;
  r.activation_bytes = act;
  r.other_bytes = other;
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryPlan, CacheGetsTheBudgetLeftByWeightsActivationsAndOther) {
  const MemoryPlan plan =
      plan_device_memory(h200(), request(0.9, 16 * kGiB, 2 * kGiB, kGiB), plan_spec(), plan_config(), 64, 8192);
  const std::int64_t budget = static_cast<std::int64_t>(0.9 * 140.0 * kGiB);
  EXPECT_EQ(plan.budget_bytes, budget);
  EXPECT_EQ(plan.cache_bytes, budget - 19 * kGiB);
  // 16 rows of (584 + 68) B per page; 64 state + 16 snapshot slots of one ring each.
  const std::int64_t page = 16 * (584 + 68), fixed = 80 * 128 * 584;
  EXPECT_EQ(plan.layout.page_bytes(), page);
  EXPECT_EQ(plan.layout.num_pages, (plan.cache_bytes - fixed) / page);
  EXPECT_EQ(plan.max_tokens, std::int64_t{plan.layout.num_pages} * 64);
  EXPECT_LE(plan.layout.total_bytes(), plan.cache_bytes);
  const std::string line = plan.summary();
  EXPECT_NE(line.find("weights 16.00 GiB, activations 2.00 GiB, other 1.00 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find(std::to_string(plan.layout.num_pages) + " pages of 64 tokens"), std::string::npos) << line;
  EXPECT_NE(line.find(std::to_string(plan.max_tokens) + " tokens"), std::string::npos) << line;
}

TEST(MemoryPlan, ExplicitCacheBytesReplaceTheUtilizationsRest) {
  MemoryRequest r = request(0.9, 16 * kGiB, 2 * kGiB, kGiB);
  r.cache_memory_bytes = 4 * kGiB;
  r.free_now = 100 * kGiB;
  const MemoryPlan plan = plan_device_memory(h200(), r, plan_spec(), plan_config(), 64, 8192);
  EXPECT_EQ(plan.cache_bytes, 4 * kGiB);
  EXPECT_LE(plan.layout.total_bytes(), 4 * kGiB);
  EXPECT_NE(plan.summary().find("cache_memory_bytes 4.00 GiB"), std::string::npos);
  r.cache_memory_bytes = 120 * kGiB;
  EXPECT_NE(error_of([&] { plan_device_memory(h200(), r, plan_spec(), plan_config(), 64, 8192); })
                .find("only 100.00 GiB are free"),
            std::string::npos);
}

TEST(MemoryPlan, ExplicitPageCountIsCheckedAgainstTheBudget) {
  cache::CacheConfig c = plan_config();
  c.num_pages = 1000;
  const MemoryPlan plan = plan_device_memory(h200(), request(0.9, 16 * kGiB, 0, 0), plan_spec(), c, 64, 8192);
  EXPECT_EQ(plan.layout.num_pages, 1000);
  c.num_pages = 2'000'000'000;
  EXPECT_NE(error_of([&] { plan_device_memory(h200(), request(0.9, 16 * kGiB, 0, 0), plan_spec(), c, 64, 8192); })
                .find("--num-cache-pages 2000000000"),
            std::string::npos);
}

TEST(MemoryPlan, UtilizationOutsideZeroToOneIsRejected) {
  for (double bad : {0.0, -0.5, 1.01}) {
    const std::string e = error_of([&] { check_weights_fit(h200(), bad, kGiB); });
    EXPECT_NE(e.find("--gpu-memory-utilization"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("must be in (0, 1]"), std::string::npos) << e;
  }
}

TEST(MemoryPlan, BudgetLargerThanTheFreeMemoryNamesBothNumbers) {
  const DeviceMemory busy{"cuda:1 (test H200)", 140 * kGiB, 60 * kGiB};
  const std::string e = error_of([&] { check_weights_fit(busy, 0.9, kGiB); });
  EXPECT_NE(e.find("cuda:1 (test H200)"), std::string::npos) << e;
  EXPECT_NE(e.find("asks for 126.00 GiB of its 140.00 GiB, but only 60.00 GiB are free"), std::string::npos) << e;
  EXPECT_NO_THROW(check_weights_fit(busy, 0.4, kGiB));
}

TEST(MemoryPlan, WeightsThatDoNotFitTheBudgetAreAnErrorWithTheNumbers) {
  const std::string e = error_of([&] { check_weights_fit(h200(), 0.5, 80 * kGiB); });
  EXPECT_NE(e.find("the weights need 80.00 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("allows 70.00 GiB"), std::string::npos) << e;
  EXPECT_NO_THROW(check_weights_fit(h200(), 0.9, 80 * kGiB));
}

TEST(MemoryPlan, NothingLeftForTheCacheIsAnError) {
  const std::string e = error_of(
      [&] { plan_device_memory(h200(), request(0.5, 60 * kGiB, 9 * kGiB, 2 * kGiB), plan_spec(), plan_config(), 64, 8192); });
  EXPECT_NE(e.find("no memory left for the KV cache"), std::string::npos) << e;
  EXPECT_NE(e.find("gives 70.00 GiB, and the weights take 60.00 GiB"), std::string::npos) << e;
}

TEST(MemoryPlan, CacheHoldingOnlyTheStateSlotsIsAnError) {
  // 5 MiB: less than the 80 slots of one 73 KB ring each (5.7 MiB), let alone a page.
  MemoryRequest r = request(0.9, 0, 0, 0);
  r.cache_memory_bytes = 5 << 20;
  const std::string e = error_of([&] { plan_device_memory(h200(), r, plan_spec(), plan_config(), 64, 8192); });
  EXPECT_NE(e.find("hold only the per-sequence state of 80 slots"), std::string::npos) << e;
}

TEST(MemoryPlan, MaxModelLenBeyondTheCacheSaysHowFarToLowerIt) {
  MemoryRequest r = request(0.9, 0, 0, 0);
  r.cache_memory_bytes = 80 * 128 * 584 + 10 * 16 * (584 + 68);  // the slots and exactly 10 pages
  const MemoryPlan fits = plan_device_memory(h200(), r, plan_spec(), plan_config(), 64, 640);
  EXPECT_EQ(fits.layout.num_pages, 10);
  EXPECT_EQ(fits.max_tokens, 640);
  const std::string e = error_of([&] { plan_device_memory(h200(), r, plan_spec(), plan_config(), 64, 641); });
  EXPECT_NE(e.find("max_model_len 641 needs 11 pages"), std::string::npos) << e;
  EXPECT_NE(e.find("lower --max-model-len to at most 640"), std::string::npos) << e;
}

TEST(ExecutorDevice, CpuCudaAndCudaNParseAndAnythingElseIsAnError) {
  EXPECT_FALSE(parse_device("cpu").cuda);
  EXPECT_EQ(parse_device("cuda").name(), "cuda:0");
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:12345", "CUDA", ""}) {
    const std::string e = error_of([&] { parse_device(bad); });
    EXPECT_NE(e.find("expected cpu, cuda or cuda:N"), std::string::npos) << bad << ": " << e;
  }
}

}  // namespace
}  // namespace deepinfer::model
