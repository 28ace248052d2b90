// Sparse attention with sinks against a plain softmax, the reference's bf16-probability variant,
// multi-source/paged KV addressing and batch invariance; indexer scores and visible top-k.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

// softmax over the selected rows and the sink, sink in the denominator only.
std::vector<double> naive_attention(const Tensor& q, const Tensor& kv, const std::vector<std::int32_t>& idx,
                                    std::int64_t k, const Tensor& sinks, float scale, bool round_probs) {
  const std::int64_t t_count = q.dim(0), heads = q.dim(1), d = q.dim(2);
  const auto qv = values(q), kvv = values(kv), sv = values(sinks);
  std::vector<double> out(static_cast<std::size_t>(t_count * heads * d), 0.0);
  for (std::int64_t t = 0; t < t_count; ++t)
    for (std::int64_t h = 0; h < heads; ++h) {
      std::vector<double> s;
      std::vector<std::int32_t> rows;
      double mx = -INFINITY;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int32_t r = idx[static_cast<std::size_t>(t * k + j)];
        if (r < 0) continue;
        double dot = 0;
        for (std::int64_t i = 0; i < d; ++i) dot += double(qv[(t * heads + h) * d + i]) * kvv[r * d + i];
        s.push_back(dot * scale);
        rows.push_back(r);
        mx = std::max(mx, s.back());
      }
      double denom = std::exp(sv[h] - mx);
      for (double v : s) denom += std::exp(v - mx);
      for (std::size_t j = 0; j < s.size(); ++j) {
        double p = std::exp(s[j] - mx);
        if (round_probs) p = round_to_bf16(static_cast<float>(p));
        for (std::int64_t i = 0; i < d; ++i) out[static_cast<std::size_t>((t * heads + h) * d + i)] += p / denom * kvv[rows[j] * d + i];
      }
    }
  return out;
}

Tensor attend(const Tensor& q, std::span<const RowView> sources, const Tensor& idx, const Tensor& sinks,
              AttentionOptions options) {
  Tensor out = Tensor::empty(q.shape(), DType::kF32);
  backend().sparse_attention(q, sources, idx, sinks, options, out);
  return out;
}

TEST(SparseAttention, MatchesSoftmaxWithSinkAndSkipsMinusOne) {
  const Tensor q = random_tensor(Shape{3, 4, 32}, 1);
  const Tensor kv = random_tensor(Shape{150, 32}, 2);
  const Tensor sinks = random_tensor(Shape{4}, 3);
  std::vector<std::int32_t> idx;
  for (int t = 0; t < 3; ++t)
    for (int j = 0; j < 140; ++j) idx.push_back(j % 7 == 3 ? -1 : (j * 13 + t) % 150);
  const Tensor idx_t = test::i32_tensor(Shape{3, 140}, idx);
  const RowView source = RowView::contiguous(kv);
  const float scale = 1.0f / std::sqrt(32.0f);
  const auto got = values(attend(q, {&source, 1}, idx_t, sinks, {scale, false, 64}));
  test::expect_near_rel(got, naive_attention(q, kv, idx, 140, sinks, scale, false), 1e-5);
}

TEST(SparseAttention, Bf16ProbabilitiesInOneBlockRoundAgainstTheGlobalMax) {
  const Tensor q = random_tensor(Shape{2, 2, 16}, 4, 2.0f);
  const Tensor kv = random_tensor(Shape{40, 16}, 5);
  const Tensor sinks = random_tensor(Shape{2}, 6);
  std::vector<std::int32_t> idx;
  for (int t = 0; t < 2; ++t)
    for (int j = 0; j < 40; ++j) idx.push_back(j);
  const RowView source = RowView::contiguous(kv);
  const auto got = values(attend(q, {&source, 1}, test::i32_tensor(Shape{2, 40}, idx), sinks, {0.25f, true, 64}));
  test::expect_near_rel(got, naive_attention(q, kv, idx, 40, sinks, 0.25f, true), 2e-6);
  const auto exact = values(attend(q, {&source, 1}, test::i32_tensor(Shape{2, 40}, idx), sinks, {0.25f, false, 64}));
  EXPECT_NE(got, exact);
}

TEST(SparseAttention, SourcesConcatenateAndPagesResolve) {
  const Tensor q = random_tensor(Shape{2, 3, 8}, 7);
  const Tensor all = random_tensor(Shape{10, 8}, 8, 1.0f, DType::kBF16);
  const Tensor sinks = random_tensor(Shape{3}, 9);
  // Rows 0..3 in a ring tensor, rows 4..9 paged (pages of 2, physical order reversed).
  const RowView ring = RowView::contiguous(all.narrow(0, 0, 4).clone());
  Tensor pool = Tensor::empty(Shape{6, 8}, DType::kBF16);
  for (int page = 0; page < 3; ++page) {
    Tensor dst = pool.narrow(0, (2 - page) * 2, 2);
    backend().copy(all.narrow(0, 4 + page * 2, 2), dst);
  }
  const RowView paged{pool, test::i32_tensor(Shape{3}, {2, 1, 0}), 2, 6};
  const RowView sources[2] = {ring, paged};
  std::vector<std::int32_t> idx = {0, 5, 9, -1, 3, 1, 8, 2, 7, -1, -1, 4};
  const Tensor idx_t = test::i32_tensor(Shape{2, 6}, idx);
  const RowView flat = RowView::contiguous(all);
  test::expect_bits_equal(values(attend(q, sources, idx_t, sinks, {0.3f, true, 4})),
                          values(attend(q, {&flat, 1}, idx_t, sinks, {0.3f, true, 4})));
}

TEST(SparseAttention, TokensDoNotDependOnTheirBatch) {
  const Tensor q = random_tensor(Shape{9, 2, 16}, 10);
  const Tensor kv = random_tensor(Shape{70, 16}, 11);
  const Tensor sinks = random_tensor(Shape{2}, 12);
  std::vector<std::int32_t> idx;
  for (int t = 0; t < 9; ++t)
    for (int j = 0; j < 70; ++j) idx.push_back(j <= 60 + t ? j : -1);
  const RowView source = RowView::contiguous(kv);
  const auto all = values(attend(q, {&source, 1}, test::i32_tensor(Shape{9, 70}, idx), sinks, {0.2f, true, 64}));
  for (int t : {0, 4, 8}) {
    const std::vector<std::int32_t> one(idx.begin() + t * 70, idx.begin() + (t + 1) * 70);
    const auto got =
        values(attend(q.narrow(0, t, 1).clone(), {&source, 1}, test::i32_tensor(Shape{1, 70}, one), sinks, {0.2f, true, 64}));
    test::expect_bits_equal(got, std::vector<float>(all.begin() + t * 32, all.begin() + (t + 1) * 32));
  }
}

// Two tokens of different sequences: token 0 reads 4 keys from row 0, token 1 reads 3 from row 5
// of a paged key store; entries past a token's count score -inf.
TEST(IndexerScores, WeightedSumOfReluDotsOverEachTokensOwnKeys) {
  const Tensor q = random_tensor(Shape{2, 3, 16}, 13);
  const Tensor pool = random_tensor(Shape{12, 16}, 14);
  const RowView keys{pool, test::i32_tensor(Shape{3}, {2, 0, 1}), 4, 12};
  const Tensor w = random_tensor(Shape{2, 3}, 15);
  Tensor out = Tensor::empty(Shape{2, 5}, DType::kF32);
  backend().indexer_scores(q, keys, test::i32_tensor(Shape{2}, {0, 5}), test::i32_tensor(Shape{2}, {4, 3}), w, out);
  const auto qv = values(q), kv = values(pool), wv = values(w), o = values(out);
  const int base[2] = {0, 5}, count[2] = {4, 3};
  const int pages[3] = {2, 0, 1};
  for (int t = 0; t < 2; ++t)
    for (int s = 0; s < 5; ++s) {
      if (s >= count[t]) {
        EXPECT_EQ(o[t * 5 + s], -INFINITY);
        continue;
      }
      const int logical = base[t] + s, phys = pages[logical / 4] * 4 + logical % 4;
      double want = 0;
      for (int h = 0; h < 3; ++h) {
        double dot = 0;
        for (int i = 0; i < 16; ++i) dot += double(qv[(t * 3 + h) * 16 + i]) * kv[phys * 16 + i];
        want += wv[t * 3 + h] * std::max(dot, 0.0);
      }
      EXPECT_NEAR(o[t * 5 + s], want, 1e-4);
    }
  EXPECT_THROW(backend().indexer_scores(q, keys, test::i32_tensor(Shape{2}, {0, 10}),
                                        test::i32_tensor(Shape{2}, {4, 3}), w, out),
               Error);
}

TEST(TopkVisible, MasksFutureEntriesOrdersByScoreThenIndexAndPads) {
  // ratio 4: position 7 sees entries 0,1; position 12 sees 0..2; position 2 sees none.
  const Tensor scores = Tensor::from_f32(Shape{3, 4}, std::vector<float>{1, 5, 9, 9, 2, 2, 7, 8, 3, 3, 3, 3});
  Tensor out = Tensor::empty(Shape{3, 3}, DType::kI32);
  backend().topk_visible(scores, test::i32_tensor(Shape{3}, {7, 12, 2}), 4, 3, test::i32_tensor(Shape{3}, {100, 200, 300}),
                         out);
  const std::int32_t* o = out.data<std::int32_t>();
  const std::vector<std::int32_t> got(o, o + 9);
  const std::vector<std::int32_t> want = {101, 100, -1, 202, 200, 201, -1, -1, -1};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace deepinfer::ops
