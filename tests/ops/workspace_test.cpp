// Workspace arena: the same allocation sequence after reset() gets the same addresses (what a
// captured graph relies on), growth coalesces, and retain() keeps replaced blocks alive.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/op_test_util.h"
#include "ops/workspace.h"

namespace deepinfer::ops {
namespace {

std::vector<const void*> run_pass(Workspace& ws, const std::vector<std::int64_t>& sizes) {
  std::vector<const void*> ptrs;
  for (std::int64_t n : sizes) ptrs.push_back(ws.alloc(Shape{n}, DType::kF32).raw_data());
  return ptrs;
}

TEST(Workspace, RepeatedPassesGetTheSameAddresses) {
  Workspace ws(test::backend(), 1 << 16);
  const std::vector<std::int64_t> sizes = {5, 1000, 3, 4096, 17};
  const auto first = run_pass(ws, sizes);
  for (int pass = 0; pass < 3; ++pass) {
    ws.reset();
    EXPECT_EQ(run_pass(ws, sizes), first) << "pass " << pass;
  }
  for (const void* p : first) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
}

TEST(Workspace, MarkAndReleaseReplayTheSameAddressesWithinAPass) {
  Workspace ws(test::backend(), 1 << 16);
  ws.alloc(Shape{100}, DType::kF32);
  const Workspace::Mark m = ws.mark();
  const auto layer0 = run_pass(ws, {64, 7});
  ws.release(m);
  EXPECT_EQ(run_pass(ws, {64, 7}), layer0);
}

TEST(Workspace, GrowthCoalescesOnceThenStaysStable) {
  Workspace ws(test::backend(), 4096);
  const std::vector<std::int64_t> sizes = {512, 1 << 18, 1 << 19};  // outgrows the first block twice
  run_pass(ws, sizes);
  ws.reset();  // coalesces into one block of the peak size
  const std::size_t capacity = ws.capacity_bytes();
  const auto steady = run_pass(ws, sizes);
  for (int pass = 0; pass < 2; ++pass) {
    ws.reset();
    EXPECT_EQ(run_pass(ws, sizes), steady);
    EXPECT_EQ(ws.capacity_bytes(), capacity);
  }
}

TEST(Workspace, RetainKeepsBlocksAliveAcrossCoalescing) {
  Workspace ws(test::backend(), 4096);
  Tensor small = ws.alloc(Shape{256}, DType::kF32);
  for (int i = 0; i < 256; ++i) small.data<float>()[i] = static_cast<float>(i);
  std::shared_ptr<const void> held = ws.retain();  // e.g. held by a captured graph
  ws.alloc(Shape{1 << 18}, DType::kF32);           // second block
  ws.reset();                                      // drops both blocks for one coalesced block
  Tensor big = ws.alloc(Shape{(1 << 18) + 256}, DType::kF32);
  for (std::int64_t i = 0; i < big.numel(); ++i) big.data<float>()[i] = -1.0f;
  // The retained block is still allocated and untouched (ASan builds would flag a freed one).
  for (int i = 0; i < 256; ++i) ASSERT_EQ(small.data<float>()[i], static_cast<float>(i));
  held.reset();
}

}  // namespace
}  // namespace deepinfer::ops
