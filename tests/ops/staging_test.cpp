// Step-input staging on the CPU backend (layout arithmetic, host == device views, no copy) and the
// graph API's "not supported" answers there; the CUDA side is in cuda_graph_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "ops/graph.h"
#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

TEST(StagingLayout, SlicesAreAlignedPackedInOrderAndSizedByDtype) {
  StagingLayout layout;
  EXPECT_EQ(layout.add("ids", Shape{3}, DType::kI32), 0u);                 // 12 bytes at 0
  EXPECT_EQ(layout.add("positions", Shape{5}, DType::kI32, 16), 1u);      // next multiple of 16
  EXPECT_EQ(layout.add("pages", Shape{2, 7}, DType::kI32, 256), 2u);      // next multiple of 256
  EXPECT_EQ(layout.add("temps", Shape{4}, DType::kF32, 4), 3u);           // right after: 4-aligned
  EXPECT_EQ(layout.add("mask", Shape{0}, DType::kU8, 64), 4u);            // empty slices are allowed
  const auto& s = layout.slices();
  EXPECT_EQ(s[0].offset, 0u);
  EXPECT_EQ(s[0].bytes, 12u);
  EXPECT_EQ(s[1].offset, 16u);
  EXPECT_EQ(s[1].bytes, 20u);
  EXPECT_EQ(s[2].offset, 256u);
  EXPECT_EQ(s[2].bytes, 56u);
  EXPECT_EQ(s[3].offset, 312u);
  EXPECT_EQ(s[4].offset, 384u);
  EXPECT_EQ(layout.bytes(), 384u);
  EXPECT_EQ(layout.index_of("pages"), 2u);
  EXPECT_EQ(layout.slice("temps").shape, Shape({4}));
  EXPECT_EQ(layout.slice("temps").dtype, DType::kF32);
}

TEST(StagingLayout, RejectsDuplicateOrEmptyNamesBadAlignmentAndUnknownSlices) {
  StagingLayout layout;
  layout.add("ids", Shape{4}, DType::kI32);
  EXPECT_THROW(layout.add("ids", Shape{1}, DType::kI32), Error);
  EXPECT_THROW(layout.add("", Shape{1}, DType::kI32), Error);
  EXPECT_THROW(layout.add("odd", Shape{1}, DType::kI32, 24), Error);
  EXPECT_THROW(layout.add("zero", Shape{1}, DType::kI32, 0), Error);
  EXPECT_THROW(layout.add("huge", Shape{1}, DType::kI32, 8192), Error);
  try {
    layout.slice("positions");
    FAIL() << "no error for an unknown slice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positions"), std::string::npos) << e.what();
  }
}

TEST(StagingBuffer, CpuBackendSharesHostAndDeviceMemoryWithAlignedSlices) {
  StagingLayout layout;
  layout.add("ids", Shape{3}, DType::kI32);
  layout.add("scores", Shape{2, 2}, DType::kF32, 64);
  StagingBuffer staging(test::backend(), layout);
  Tensor ids = staging.host("ids");
  Tensor scores = staging.host(1);
  EXPECT_TRUE(ids.device().is_cpu());
  EXPECT_EQ(ids.shape(), Shape({3}));
  EXPECT_EQ(scores.shape(), Shape({2, 2}));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(scores.raw_data()) % 64, 0u);
  for (int i = 0; i < 3; ++i) ids.data<std::int32_t>()[i] = 10 + i;
  for (int i = 0; i < 4; ++i) scores.data<float>()[i] = 0.5f * static_cast<float>(i);
  staging.upload();  // nothing to copy: the "device" is host memory
  Tensor dev_ids = staging.device("ids");
  EXPECT_EQ(dev_ids.raw_data(), ids.raw_data());
  EXPECT_EQ(dev_ids.data<std::int32_t>()[2], 12);
  EXPECT_EQ(staging.device("scores").data<float>()[3], 1.5f);
  // Device views keep their address across uploads (what a captured graph would read).
  const void* before = staging.device("scores").raw_data();
  staging.host("ids").data<std::int32_t>()[0] = 99;
  staging.upload();
  EXPECT_EQ(staging.device("scores").raw_data(), before);
  EXPECT_EQ(staging.device("ids").data<std::int32_t>()[0], 99);
  EXPECT_EQ(staging.bytes(), layout.bytes());
}

TEST(StagingBuffer, StagedSlicesFeedOpsAsInputs) {
  StagingLayout layout;
  layout.add("ids", Shape{4}, DType::kI32);
  StagingBuffer staging(test::backend(), layout);
  const Tensor table = test::random_tensor(Shape{9, 5}, 3);
  Tensor out = Tensor::empty(Shape{2, 5}, DType::kF32);
  Tensor ids = staging.host("ids");
  const std::int32_t step_ids[4] = {7, 2, -1, -1};  // this step uses the first 2 of 4 slots
  std::memcpy(ids.raw_data(), step_ids, sizeof(step_ids));
  staging.upload();
  test::backend().embedding(staging.device("ids").narrow(0, 0, 2), table, out);
  for (int c = 0; c < 5; ++c) {
    EXPECT_EQ(out.item_f32(c), table.item_f32(7 * 5 + c));
    EXPECT_EQ(out.item_f32(5 + c), table.item_f32(2 * 5 + c));
  }
}

TEST(StagingBuffer, RejectsBadSlotCountsAndSliceIndices) {
  StagingLayout layout;
  layout.add("ids", Shape{1}, DType::kI32);
  EXPECT_THROW(StagingBuffer(test::backend(), layout, 0), Error);
  EXPECT_THROW(StagingBuffer(test::backend(), layout, 9), Error);
  StagingBuffer staging(test::backend(), layout);
  EXPECT_THROW(staging.host(1), Error);
  EXPECT_THROW(staging.device("nope"), Error);
}

TEST(GraphApi, CpuBackendReportsNoGraphsAndRefusesToCapture) {
  Backend& cpu = test::backend();
  EXPECT_FALSE(supports_graphs(cpu));
  EXPECT_FALSE(is_capturing(cpu));
  EXPECT_THROW(begin_capture(cpu), Error);
  EXPECT_THROW(end_capture(cpu), Error);
  abort_capture(cpu);  // no-op, no throw
  bool ran = false;
  EXPECT_THROW(capture_graph(cpu, [&] { ran = true; }), Error);
  EXPECT_FALSE(ran);
  Graph empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.num_nodes(), 0u);
  EXPECT_THROW(empty.replay(), Error);
}

}  // namespace
}  // namespace deepinfer::ops
