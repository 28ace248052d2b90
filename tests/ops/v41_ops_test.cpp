// The V4.1 ops of the CPU backend: hc_mix + hc_collapse reproduce hc_pre (lagged single-pass mHC
// only moves the collapse weights), hc_collapse with given weights, the Engram gate against a
// double-precision transcription of MODEL_SPEC B4.7, and top-k skipping masked (-inf) entries.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

TEST(HcMix, CoefficientsAndOwnCollapseEqualHcPre) {
  const int n = 4, d = 24, t = 3;
  const Tensor x = random_tensor(Shape{t, n, d}, 11);
  const HcWeights w{random_tensor(Shape{(2 + n) * n, n * d}, 12, 0.3f), random_tensor(Shape{(2 + n) * n}, 13),
                    random_tensor(Shape{3}, 14)};
  const HcOptions opt{20, 1e-6f, 1e-20f};
  Tensor y = Tensor::empty(Shape{t, d}, DType::kF32), post = Tensor::empty(Shape{t, n}, DType::kF32);
  Tensor comb = Tensor::empty(Shape{t, n, n}, DType::kF32);
  backend().hc_pre(x, w, opt, y, post, comb);
  Tensor pre2 = Tensor::empty(Shape{t, n}, DType::kF32), post2 = Tensor::empty(Shape{t, n}, DType::kF32);
  Tensor comb2 = Tensor::empty(Shape{t, n, n}, DType::kF32), y2 = Tensor::empty(Shape{t, d}, DType::kF32);
  backend().hc_mix(x, w, opt, pre2, post2, comb2);
  backend().hc_collapse(x, pre2, y2);
  test::expect_bits_equal(values(post2), values(post));
  test::expect_bits_equal(values(comb2), values(comb));
  test::expect_bits_equal(values(y2), values(y));
  for (float p : values(pre2)) EXPECT_GT(p, 0.0f);  // sigmoid + hc_eps
}

TEST(HcCollapse, WeightsTheCopiesWithTheGivenPre) {
  const int n = 3, d = 5;
  const Tensor x = random_tensor(Shape{2, n, d}, 21);
  const Tensor pre = Tensor::from_f32(Shape{2, n}, std::vector<float>{1, 0, 0, 0.25f, -2, 0.5f});
  Tensor y = Tensor::empty(Shape{2, d}, DType::kF32);
  backend().hc_collapse(x, pre, y);
  const auto xv = values(x), pv = values(pre), yv = values(y);
  for (int t = 0; t < 2; ++t)
    for (int e = 0; e < d; ++e) {
      double want = 0;
      for (int i = 0; i < n; ++i) want += double(pv[t * n + i]) * xv[(t * n + i) * d + e];
      EXPECT_NEAR(yv[t * d + e], want, 1e-6 * (1 + std::fabs(want)));
    }
}

TEST(EngramGate, AddsTheGatedValueToEveryCopy) {
  const int n = 4, d = 16, t = 2;
  const Tensor x = random_tensor(Shape{t, n, d}, 31);
  const Tensor key = random_tensor(Shape{t, n, d}, 32);
  const Tensor value = random_tensor(Shape{t, d}, 33);
  std::vector<float> om = values(random_tensor(Shape{n, d}, 34));
  for (int c = 0; c < d; ++c) om[static_cast<std::size_t>(d + c)] = 0.0f;  // copy 1: dot = 0, gate = σ(0)
  const Tensor omega = Tensor::from_f32(Shape{n, d}, om);
  Tensor out = Tensor::empty(Shape{t, n, d}, DType::kF32);
  const float eps = 1e-20f;
  backend().engram_gate(x, key, value, omega, eps, out);
  const auto xv = values(x), kv = values(key), vv = values(value), ov = values(out);
  for (int tt = 0; tt < t; ++tt)
    for (int i = 0; i < n; ++i) {
      const std::size_t base = static_cast<std::size_t>((tt * n + i) * d);
      double dot = 0, xx = 0, kk = 0;
      for (int c = 0; c < d; ++c) {
        dot += double(xv[base + c]) * om[static_cast<std::size_t>(i * d + c)] * kv[base + c];
        xx += double(xv[base + c]) * xv[base + c];
        kk += double(kv[base + c]) * kv[base + c];
      }
      const double s = dot / std::sqrt(xx / d + eps) / std::sqrt(kk / d + eps) / std::sqrt(double(d));
      const double mag = std::sqrt(std::max(std::fabs(s), 1e-6));
      const double gate = 1.0 / (1.0 + std::exp(-(s > 0 ? mag : s < 0 ? -mag : 0.0)));
      if (i == 1) {
        EXPECT_EQ(gate, 0.5);
      }
      for (int c = 0; c < d; ++c) {
        const double want = xv[base + c] + gate * vv[static_cast<std::size_t>(tt * d + c)];
        EXPECT_NEAR(ov[base + c], want, 1e-5 * (1 + std::fabs(want))) << "token " << tt << " copy " << i;
      }
    }
}

TEST(TopkVisible, NeverPicksMaskedMinusInfEntries) {
  // ratio 1, position 5 sees entries 0..5; entries 1, 2 and 4 are masked (outside V4.1 candidates).
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor scores = Tensor::from_f32(Shape{1, 6}, std::vector<float>{0.5f, -inf, -inf, 0.1f, -inf, 0.2f});
  Tensor out = Tensor::empty(Shape{1, 4}, DType::kI32);
  backend().topk_visible(scores, test::i32_tensor(Shape{1}, {5}), 1, 4, test::i32_tensor(Shape{1}, {10}), out);
  const std::int32_t* o = out.data<std::int32_t>();
  EXPECT_EQ(std::vector<std::int32_t>(o, o + 4), (std::vector<std::int32_t>{10, 15, 13, -1}));
}

// Blocks of 3 entries, ratio 2, 2 blocks kept. Row 0 at position 15 sees 8 entries: blocks {0,1,2}
// score 0.9, 0.7, newest block 2 forced in -> blocks 2 and 0. Row 1 at position 1 sees entry 0 only
// (block 0, forced). Row 2 at position 0 sees nothing: all -inf. Ties go to the lower block.
TEST(CandidateMask, KeepsTheBestBlocksAndTheNewestBlockOfVisibleEntries) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> row0 = {0.1f, 0.9f, 0.2f, 0.7f, 0.0f, 0.3f, -5.0f, -6.0f, 99.0f, 1.0f};  // 8, 9 invisible
  std::vector<float> all = row0;
  for (int r = 1; r < 3; ++r) all.insert(all.end(), row0.begin(), row0.end());
  const Tensor scores = Tensor::from_f32(Shape{3, 10}, all);
  Tensor out = Tensor::empty(Shape{3, 10}, DType::kF32);
  backend().candidate_mask(scores, test::i32_tensor(Shape{3}, {15, 1, 0}), 2, 3, 2, out);
  const float* o = out.data<float>();
  const std::vector<float> want0 = {0, 0, 0, -inf, -inf, -inf, 0, 0, 0, -inf};
  const std::vector<float> want1 = {0, 0, 0, -inf, -inf, -inf, -inf, -inf, -inf, -inf};
  EXPECT_EQ(std::vector<float>(o, o + 10), want0);
  EXPECT_EQ(std::vector<float>(o + 10, o + 20), want1);
  EXPECT_EQ(std::vector<float>(o + 20, o + 30), std::vector<float>(10, -inf));
  // Equal block maxima: the lower block wins the last place.
  const Tensor tied = Tensor::from_f32(Shape{1, 9}, std::vector<float>{0.5f, 0, 0, 0.5f, 0, 0, 0, 0, 0.1f});
  Tensor out2 = Tensor::empty(Shape{1, 9}, DType::kF32);
  backend().candidate_mask(tied, test::i32_tensor(Shape{1}, {8}), 1, 3, 2, out2);
  const float* o2 = out2.data<float>();
  EXPECT_EQ(std::vector<float>(o2, o2 + 9), (std::vector<float>{0, 0, 0, -inf, -inf, -inf, 0, 0, 0}));
}

}  // namespace
}  // namespace deepinfer::ops
