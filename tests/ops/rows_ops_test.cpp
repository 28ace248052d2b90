// Row-wise CPU ops against their formulas: RMSNorm, interleaved RoPE (and its inverse), SwiGLU
// clamps, embedding expansion, gathers/scatters through a paged RowView, argmax, the workspace.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"
#include "ops/workspace.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

TEST(RmsNorm, WeightedAndUnweightedFollowTheFormula) {
  const Tensor x = random_tensor(Shape{4, 3, 10}, 1);
  const Tensor w = random_tensor(Shape{10}, 2);
  Tensor out = Tensor::empty(x.shape(), DType::kF32);
  backend().rms_norm(x, &w, 1e-6f, out);
  Tensor plain = Tensor::empty(x.shape(), DType::kF32);
  backend().rms_norm(x, nullptr, 1e-6f, plain);
  const auto xv = values(x), wv = values(w), ov = values(out), pv = values(plain);
  for (int r = 0; r < 12; ++r) {
    double ss = 0;
    for (int i = 0; i < 10; ++i) ss += double(xv[r * 10 + i]) * xv[r * 10 + i];
    const double inv = 1.0 / std::sqrt(ss / 10 + 1e-6);
    for (int i = 0; i < 10; ++i) {
      EXPECT_NEAR(pv[r * 10 + i], xv[r * 10 + i] * inv, 1e-5);
      EXPECT_NEAR(ov[r * 10 + i], wv[i] * xv[r * 10 + i] * inv, 1e-5);
    }
  }
}

RopeTable table(int rd, float base) {
  std::vector<float> f(static_cast<std::size_t>(rd / 2));
  for (int i = 0; i < rd / 2; ++i) f[static_cast<std::size_t>(i)] = std::pow(base, -2.0f * i / rd);
  return {Tensor::from_f32(Shape{rd / 2}, f), rd};
}

TEST(Rope, RotatesInterleavedPairsOfTheTrailingDims) {
  const Tensor x = random_tensor(Shape{3, 2, 12}, 3);
  Tensor y = x.clone();
  const RopeTable t = table(8, 10000.0f);
  const Tensor pos = test::i32_tensor(Shape{3}, {0, 5, 1000});
  backend().rope(y, pos, t, false);
  const auto xv = values(x), yv = values(y), f = values(t.inv_freq);
  const int p[3] = {0, 5, 1000};
  for (int tk = 0; tk < 3; ++tk)
    for (int h = 0; h < 2; ++h) {
      const int base = (tk * 2 + h) * 12;
      for (int i = 0; i < 4; ++i) EXPECT_EQ(yv[base + i], xv[base + i]);  // nope dims untouched
      for (int i = 0; i < 4; ++i) {
        const double a = double(p[tk]) * f[i];
        const double x0 = xv[base + 4 + 2 * i], x1 = xv[base + 5 + 2 * i];
        EXPECT_NEAR(yv[base + 4 + 2 * i], x0 * std::cos(a) - x1 * std::sin(a), 2e-4);
        EXPECT_NEAR(yv[base + 5 + 2 * i], x0 * std::sin(a) + x1 * std::cos(a), 2e-4);
      }
    }
  backend().rope(y, pos, t, true);
  const auto back = values(y);
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(back[i], xv[i], 1e-5);
}

TEST(Swiglu, GateIsClampedAboveOnlyAndUpOnBothSides) {
  const Tensor g = Tensor::from_f32(Shape{1, 4}, std::vector<float>{12.0f, -12.0f, 1.0f, 0.5f});
  const Tensor u = Tensor::from_f32(Shape{1, 4}, std::vector<float>{1.0f, 1.0f, -15.0f, 15.0f});
  Tensor out = Tensor::empty(Shape{1, 4}, DType::kF32);
  backend().swiglu(g, u, 10.0f, out);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  const auto o = values(out);
  EXPECT_NEAR(o[0], silu(10.0), 1e-5);
  EXPECT_NEAR(o[1], silu(-12.0), 1e-6);
  EXPECT_NEAR(o[2], silu(1.0) * -10.0, 1e-5);
  EXPECT_NEAR(o[3], silu(0.5) * 10.0, 1e-5);
}

TEST(Embedding, ExpandsEachTokenToEveryStreamCopy) {
  const Tensor table = random_tensor(Shape{5, 6}, 4, 1.0f, DType::kBF16);
  Tensor out = Tensor::empty(Shape{2, 3, 6}, DType::kF32);
  backend().embedding(test::i32_tensor(Shape{2}, {4, 1}), table, out);
  const auto tv = values(table), o = values(out);
  for (int t = 0; t < 2; ++t)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 6; ++i) EXPECT_EQ(o[(t * 3 + c) * 6 + i], tv[(t == 0 ? 4 : 1) * 6 + i]);
  EXPECT_THROW(backend().embedding(test::i32_tensor(Shape{2}, {5, 0}), table, out), Error);
}

TEST(Rows, ScatterThroughAPageTableAndGatherBack) {
  // 3 pages of 2 rows; logical rows 0..5 live on physical pages {2, 0, 1}.
  Tensor pool = Tensor::zeros(Shape{6, 4}, DType::kF32);
  const RowView view{pool, test::i32_tensor(Shape{3}, {2, 0, 1}), 2, 6};
  const Tensor src = random_tensor(Shape{3, 4}, 5);
  backend().scatter_rows(src, view, test::i32_tensor(Shape{3}, {0, 3, 5}));
  const auto pv = values(pool), sv = values(src);
  const int physical[3] = {4, 1, 3};  // logical 0 → page 2 row 0; 3 → page 0 row 1; 5 → page 1 row 1
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(pv[physical[i] * 4 + c], sv[i * 4 + c]);
  Tensor back = Tensor::empty(Shape{3, 4}, DType::kF32);
  backend().gather_rows(pool, test::i32_tensor(Shape{3}, {4, 1, 3}), back);
  test::expect_bits_equal(values(back), sv);
  EXPECT_THROW(backend().scatter_rows(src, view, test::i32_tensor(Shape{3}, {0, 3, 6})), Error);
  // -1 writes nowhere: only source row 1 lands (logical 2 → page 0 row 0 = physical 0).
  const std::vector<float> before = values(pool);
  backend().scatter_rows(src, view, test::i32_tensor(Shape{3}, {-1, 2, -1}));
  const auto after = values(pool);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(after[r * 4 + c], r == 0 ? sv[4 + c] : before[r * 4 + c]) << "row " << r;
}

TEST(Argmax, LowestIndexWinsTies) {
  const Tensor logits = Tensor::from_f32(Shape{2, 4}, std::vector<float>{1, 3, 3, 0, -1, -2, -1, -5});
  Tensor out = Tensor::empty(Shape{2}, DType::kI32);
  backend().argmax(logits, out);
  EXPECT_EQ(out.data<std::int32_t>()[0], 1);
  EXPECT_EQ(out.data<std::int32_t>()[1], 0);
}

TEST(Workspace, ReusesMemoryAfterResetAndCoalescesBlocks) {
  Workspace ws(backend(), 1024);
  Tensor a = ws.alloc(Shape{100}, DType::kF32);
  Tensor b = ws.alloc(Shape{1 << 19}, DType::kF32);  // forces a second block
  EXPECT_NE(a.raw_data(), b.raw_data());
  ws.reset();
  const std::size_t capacity = ws.capacity_bytes();
  Tensor c = ws.alloc(Shape{100}, DType::kF32);
  Tensor d = ws.alloc(Shape{1 << 19}, DType::kF32);
  EXPECT_EQ(ws.capacity_bytes(), capacity);  // steady state: no new block
  EXPECT_NE(c.raw_data(), d.raw_data());
}

TEST(Workspace, ReleaseToAMarkReusesTheScratchAfterIt) {
  Workspace ws(backend(), 4096);
  Tensor keep = ws.alloc(Shape{16}, DType::kF32);
  const Workspace::Mark mark = ws.mark();
  Tensor first = ws.alloc(Shape{32}, DType::kF32);
  ws.alloc(Shape{1 << 19}, DType::kF32);  // spills into a new block
  ws.release(mark);
  Tensor again = ws.alloc(Shape{32}, DType::kF32);
  EXPECT_EQ(again.raw_data(), first.raw_data());
  EXPECT_NE(again.raw_data(), keep.raw_data());
}

}  // namespace
}  // namespace deepinfer::ops
