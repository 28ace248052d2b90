// mHC coefficient/collapse/post-mix/head and MoE routing/experts against direct double-precision
// transcriptions of MODEL_SPEC A4.2, A4.6 and A4.7.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct NaiveHc {
  std::vector<double> pre, post, comb, y;
};

NaiveHc naive_hc_pre(const std::vector<float>& x, int n, int d, const HcWeights& w, int iters, double eps) {
  const auto fn = values(w.fn), base = values(w.base), sc = values(w.scale);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double rs = 1.0 / std::sqrt(ss / (n * d) + 1e-6);
  const int mix = (2 + n) * n;
  std::vector<double> m(static_cast<std::size_t>(mix));
  for (int i = 0; i < mix; ++i) {
    double dot = 0;
    for (int c = 0; c < n * d; ++c) dot += double(fn[i * n * d + c]) * x[c];
    m[i] = dot * rs;
  }
  NaiveHc r;
  for (int i = 0; i < n; ++i) {
    r.pre.push_back(sigmoid(m[i] * sc[0] + base[i]) + eps);
    r.post.push_back(2 * sigmoid(m[n + i] * sc[1] + base[n + i]));
  }
  std::vector<double> c(static_cast<std::size_t>(n * n));
  for (int j = 0; j < n; ++j) {
    double mx = -INFINITY, sum = 0;
    for (int k = 0; k < n; ++k) mx = std::max(mx, m[2 * n + j * n + k] * sc[2] + base[2 * n + j * n + k]);
    for (int k = 0; k < n; ++k) sum += std::exp(m[2 * n + j * n + k] * sc[2] + base[2 * n + j * n + k] - mx);
    for (int k = 0; k < n; ++k) c[j * n + k] = std::exp(m[2 * n + j * n + k] * sc[2] + base[2 * n + j * n + k] - mx) / sum + eps;
  }
  auto cols = [&] {
    for (int k = 0; k < n; ++k) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += c[j * n + k];
      for (int j = 0; j < n; ++j) c[j * n + k] /= s + eps;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += c[j * n + k];
      for (int k = 0; k < n; ++k) c[j * n + k] /= s + eps;
    }
    cols();
  }
  r.comb = c;
  r.y.assign(static_cast<std::size_t>(d), 0.0);
  for (int i = 0; i < n; ++i)
    for (int e = 0; e < d; ++e) r.y[e] += r.pre[i] * x[i * d + e];
  return r;
}

TEST(HcPre, CoefficientsSinkhornAndCollapseFollowTheReference) {
  const int n = 4, d = 24;
  const Tensor x = random_tensor(Shape{3, n, d}, 1);
  const HcWeights w{random_tensor(Shape{(2 + n) * n, n * d}, 2, 0.3f), random_tensor(Shape{(2 + n) * n}, 3),
                    random_tensor(Shape{3}, 4)};
  Tensor y = Tensor::empty(Shape{3, d}, DType::kF32);
  Tensor post = Tensor::empty(Shape{3, n}, DType::kF32);
  Tensor comb = Tensor::empty(Shape{3, n, n}, DType::kF32);
  backend().hc_pre(x, w, HcOptions{20, 1e-6f, 1e-6f}, y, post, comb);
  const auto xv = values(x), yv = values(y), pv = values(post), cv = values(comb);
  for (int t = 0; t < 3; ++t) {
    const std::vector<float> xt(xv.begin() + t * n * d, xv.begin() + (t + 1) * n * d);
    const NaiveHc want = naive_hc_pre(xt, n, d, w, 20, 1e-6);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(pv[t * n + i], want.post[i], 1e-5);
    for (int i = 0; i < n * n; ++i) EXPECT_NEAR(cv[t * n * n + i], want.comb[i], 1e-5);
    for (int e = 0; e < d; ++e) EXPECT_NEAR(yv[t * d + e], want.y[e], 1e-4);
    for (int k = 0; k < n; ++k) {  // ends on a column step: columns sum to ~1
      double s = 0;
      for (int j = 0; j < n; ++j) s += cv[t * n * n + j * n + k];
      EXPECT_NEAR(s, 1.0, 1e-4);
    }
  }
}

TEST(HcPost, MixesWithTheTransposedCombination) {
  const int n = 3, d = 5;
  const Tensor f = random_tensor(Shape{2, d}, 5);
  const Tensor res = random_tensor(Shape{2, n, d}, 6);
  const Tensor post = random_tensor(Shape{2, n}, 7);
  const Tensor comb = random_tensor(Shape{2, n, n}, 8);
  Tensor out = Tensor::empty(Shape{2, n, d}, DType::kF32);
  backend().hc_post(f, res, post, comb, out);
  const auto fv = values(f), rv = values(res), pv = values(post), cv = values(comb), o = values(out);
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < n; ++k)
      for (int e = 0; e < d; ++e) {
        double want = double(pv[t * n + k]) * fv[t * d + e];
        for (int j = 0; j < n; ++j) want += double(cv[t * n * n + j * n + k]) * rv[(t * n + j) * d + e];
        EXPECT_NEAR(o[(t * n + k) * d + e], want, 1e-5);
      }
}

TEST(HcHead, SigmoidWeightsWithoutSinkhorn) {
  const int n = 4, d = 8;
  const Tensor x = random_tensor(Shape{2, n, d}, 9);
  const HcWeights w{random_tensor(Shape{n, n * d}, 10, 0.3f), random_tensor(Shape{n}, 11), random_tensor(Shape{1}, 12)};
  Tensor y = Tensor::empty(Shape{2, d}, DType::kF32);
  backend().hc_head(x, w, HcOptions{}, y);
  const auto xv = values(x), fn = values(w.fn), base = values(w.base), sc = values(w.scale), yv = values(y);
  for (int t = 0; t < 2; ++t) {
    double ss = 0;
    for (int c = 0; c < n * d; ++c) ss += double(xv[t * n * d + c]) * xv[t * n * d + c];
    const double rs = 1.0 / std::sqrt(ss / (n * d) + 1e-6);
    for (int e = 0; e < d; ++e) {
      double want = 0;
      for (int i = 0; i < n; ++i) {
        double dot = 0;
        for (int c = 0; c < n * d; ++c) dot += double(fn[i * n * d + c]) * xv[t * n * d + c];
        want += (sigmoid(dot * rs * sc[0] + base[i]) + 1e-6) * xv[(t * n + i) * d + e];
      }
      EXPECT_NEAR(yv[t * d + e], want, 1e-5);
    }
  }
}

TEST(MoeRoute, BiasSelectsButDoesNotWeight) {
  // sqrt(softplus) scores; the bias pushes expert 3 into the top-2 although its score is lowest.
  const Tensor logits = Tensor::from_f32(Shape{1, 4}, std::vector<float>{2.0f, 1.0f, 0.5f, -3.0f});
  const Tensor bias = Tensor::from_f32(Shape{4}, std::vector<float>{0, 0, 0, 5.0f});
  Tensor ids = Tensor::empty(Shape{1, 2}, DType::kI32);
  Tensor w = Tensor::empty(Shape{1, 2}, DType::kF32);
  backend().moe_route(logits, &bias, nullptr, nullptr, RouteOptions{2, 1.5f}, ids, w);
  auto score = [](double z) { return std::sqrt(std::log1p(std::exp(z))); };
  EXPECT_EQ(ids.data<std::int32_t>()[0], 3);
  EXPECT_EQ(ids.data<std::int32_t>()[1], 0);
  const double s3 = score(-3.0), s0 = score(2.0);
  EXPECT_NEAR(w.data<float>()[0], 1.5 * s3 / (s3 + s0), 1e-6);
  EXPECT_NEAR(w.data<float>()[1], 1.5 * s0 / (s3 + s0), 1e-6);
}

TEST(MoeRoute, HashLayersTakeExpertsFromTheTokenTable) {
  const Tensor logits = random_tensor(Shape{2, 4}, 13);
  const Tensor table = test::i32_tensor(Shape{3, 2}, {0, 1, 2, 3, 3, 1});
  Tensor ids = Tensor::empty(Shape{2, 2}, DType::kI32);
  Tensor w = Tensor::empty(Shape{2, 2}, DType::kF32);
  const Tensor tokens = test::i32_tensor(Shape{2}, {2, 1});
  backend().moe_route(logits, nullptr, &table, &tokens, RouteOptions{2, 1.0f}, ids, w);
  const std::int32_t* o = ids.data<std::int32_t>();
  EXPECT_EQ(std::vector<std::int32_t>(o, o + 4), (std::vector<std::int32_t>{3, 1, 2, 3}));
  EXPECT_NEAR(w.data<float>()[0] + w.data<float>()[1], 1.0, 1e-6);
  const Tensor bad = test::i32_tensor(Shape{2}, {3, 0});
  EXPECT_THROW(backend().moe_route(logits, nullptr, &table, &bad, RouteOptions{2, 1.0f}, ids, w), Error);
}

TEST(MoeExperts, WeightedSwigluExpertsSummedPerToken) {
  const int d = 32, inter = 64, e = 3;
  std::vector<ExpertWeights> experts;
  std::vector<Tensor> dense;
  for (int i = 0; i < e; ++i) {
    const Tensor w1 = random_tensor(Shape{inter, d}, 20 + i), w3 = random_tensor(Shape{inter, d}, 30 + i),
                 w2 = random_tensor(Shape{d, inter}, 40 + i, 0.2f);
    experts.push_back({test::quantize_fp4(w1), test::quantize_fp4(w3), test::quantize_fp8_block(w2, 32)});
  }
  const Tensor x = random_tensor(Shape{2, d}, 14);
  const Tensor ids = test::i32_tensor(Shape{2, 2}, {2, 0, 1, 2});
  const Tensor wts = Tensor::from_f32(Shape{2, 2}, std::vector<float>{0.7f, 0.3f, 1.2f, 0.4f});
  Tensor out = Tensor::empty(Shape{2, d}, DType::kF32);
  backend().moe_experts(x, ids, wts, experts, MoeOptions{10.0f, 0, DType::kF32}, out);
  const auto xv = values(x), o = values(out);
  for (int t = 0; t < 2; ++t) {
    std::vector<double> want(d, 0.0);
    for (int k = 0; k < 2; ++k) {
      const ExpertWeights& ew = experts[static_cast<std::size_t>(ids.data<std::int32_t>()[t * 2 + k])];
      const auto w1 = values(test::dequantize(ew.w1)), w3 = values(test::dequantize(ew.w3)),
                 w2 = values(test::dequantize(ew.w2));
      std::vector<double> h(inter);
      for (int j = 0; j < inter; ++j) {
        double g = 0, u = 0;
        for (int c = 0; c < d; ++c) {
          g += double(w1[j * d + c]) * xv[t * d + c];
          u += double(w3[j * d + c]) * xv[t * d + c];
        }
        g = std::min(g, 10.0);
        u = std::clamp(u, -10.0, 10.0);
        h[j] = wts.data<float>()[t * 2 + k] * g / (1 + std::exp(-g)) * u;
      }
      for (int c = 0; c < d; ++c)
        for (int j = 0; j < inter; ++j) want[c] += double(w2[c * inter + j]) * h[j];
    }
    for (int c = 0; c < d; ++c) EXPECT_NEAR(o[t * d + c], want[c], 1e-3 * (1 + std::abs(want[c])));
  }
}

}  // namespace
}  // namespace deepinfer::ops
