// Sampler: processors, filters and the seeded Gumbel-max draw against straightforward
// reference computations; the sampled distribution against softmax; log-probabilities.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/philox.h"

namespace deepinfer::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Random logits; `levels` > 0 quantises them so ties are common.
std::vector<float> random_logits(std::uint32_t seed, std::int32_t vocab, float spread, int levels = 0) {
  std::vector<float> v(static_cast<std::size_t>(vocab));
  for (std::int32_t i = 0; i < vocab; ++i) {
    double u = uniform_from_bits(philox_bits(seed, 0, RandomPurpose::kDraftSample, static_cast<std::uint32_t>(i)));
    if (levels > 0) u = std::floor(u * levels) / levels;
    v[static_cast<std::size_t>(i)] = static_cast<float>((2.0 * u - 1.0) * spread);
  }
  return v;
}

// The filters by their definitions, with a full sort.
std::vector<std::int32_t> reference_filter(const std::vector<float>& s, std::int32_t top_k, float min_p, float top_p) {
  std::vector<std::int32_t> order;
  for (std::size_t v = 0; v < s.size(); ++v) {
    if (std::isfinite(s[v])) order.push_back(static_cast<std::int32_t>(v));
  }
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return s[static_cast<std::size_t>(a)] > s[static_cast<std::size_t>(b)] || (s[static_cast<std::size_t>(a)] == s[static_cast<std::size_t>(b)] && a < b);
  });
  if (order.empty()) return order;
  const double max = s[static_cast<std::size_t>(order[0])];
  if (top_k > 0 && static_cast<std::size_t>(top_k) < order.size()) order.resize(static_cast<std::size_t>(top_k));
  std::vector<std::int32_t> kept;
  for (std::int32_t v : order) {
    if (min_p == 0.0f || s[static_cast<std::size_t>(v)] >= max + std::log(static_cast<double>(min_p))) kept.push_back(v);
  }
  if (top_p < 1.0f && kept.size() > 1) {
    std::vector<std::int32_t> by_id = kept;
    std::sort(by_id.begin(), by_id.end());
    double z = 0.0;
    for (std::int32_t v : by_id) z += std::exp(s[static_cast<std::size_t>(v)] - max);
    double cum = 0.0;
    std::vector<std::int32_t> nucleus;
    for (std::int32_t v : kept) {
      if (cum >= top_p * z) break;
      nucleus.push_back(v);
      cum += std::exp(s[static_cast<std::size_t>(v)] - max);
    }
    kept = nucleus;
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(Sampler, FiltersMatchTheReferenceDefinitions) {
  const std::int32_t ks[] = {-1, 0, 1, 2, 5, 40, 1000};
  const float min_ps[] = {0.0f, 0.01f, 0.2f, 1.0f};
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.01f};
  int checked = 0;
  for (std::uint32_t seed = 0; seed < 12; ++seed) {
    std::vector<float> s = random_logits(seed, 300, seed % 2 == 0 ? 3.0f : 12.0f, seed % 3 == 0 ? 8 : 0);
    s[7] = -kInf;  // a masked token never survives
    for (std::int32_t k : ks) {
      for (float mp : min_ps) {
        for (float tp : top_ps) {
          const std::vector<std::int32_t> got = Sampler::filter(s, k, mp, tp);
          EXPECT_EQ(got, reference_filter(s, k, mp, tp)) << "seed " << seed << " k " << k << " min_p " << mp << " top_p " << tp;
          EXPECT_FALSE(got.empty());
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 12 * 7 * 4 * 4);
}

TEST(Sampler, GumbelMaxWithPruningEqualsTheFullComputation) {
  Sampler sampler(500);
  for (std::uint32_t seed = 0; seed < 40; ++seed) {
    // Wide spreads make most tokens prunable; narrow ones make few.
    const std::vector<float> s = random_logits(seed, 500, seed % 2 == 0 ? 2.0f : 200.0f, seed % 5 == 0 ? 4 : 0);
    std::vector<std::int32_t> cand(500);
    std::iota(cand.begin(), cand.end(), 0);
    for (std::uint32_t pos = 0; pos < 20; ++pos) {
      std::int32_t best = -1;
      double best_score = -std::numeric_limits<double>::infinity();
      for (std::int32_t v : cand) {
        const double score = static_cast<double>(s[static_cast<std::size_t>(v)]) +
                             gumbel_from_bits(philox_bits(seed * 7 + 1, pos, RandomPurpose::kTokenSample, static_cast<std::uint32_t>(v)));
        if (score > best_score) {
          best_score = score;
          best = v;
        }
      }
      EXPECT_EQ(sampler.gumbel_argmax(s, cand, seed * 7 + 1, pos), best) << "seed " << seed << " pos " << pos;
      EXPECT_EQ(sampler.gumbel_argmax_all(s, seed * 7 + 1, pos), best) << "seed " << seed << " pos " << pos;
    }
  }
}

TEST(Sampler, SampledFrequenciesFollowTheFilteredSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  Sampler sampler(6);
  for (std::int32_t top_k : {-1, 3}) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = top_k;
    std::vector<double> want(6, 0.0);
    double z = 0.0;
    const std::vector<std::int32_t> kept = Sampler::filter(std::vector<float>{1.25f, 2.5f, 0.625f, -1.25f, 1.875f, 0.0f}, top_k, 0.0f, 1.0f);
    for (std::int32_t v : kept) z += std::exp(logits[static_cast<std::size_t>(v)] / 0.8);
    for (std::int32_t v : kept) want[static_cast<std::size_t>(v)] = std::exp(logits[static_cast<std::size_t>(v)] / 0.8) / z;
    std::vector<double> freq(6, 0.0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      SampleContext ctx;
      ctx.params = &p;
      ctx.seed = 99;
      ctx.position = static_cast<std::uint32_t>(i);
      freq[static_cast<std::size_t>(sampler.sample(logits, ctx).token)] += 1.0 / n;
    }
    for (std::size_t v = 0; v < 6; ++v) EXPECT_NEAR(freq[v], want[v], 0.01) << "token " << v << " top_k " << top_k;
  }
}

TEST(Sampler, GreedyTakesTheLowestIdOnTiesAndIgnoresTheSeed) {
  Sampler sampler(5);
  SamplingParams p;
  p.temperature = 0.0f;
  SampleContext ctx;
  ctx.params = &p;
  const std::vector<float> logits = {0.0f, 3.0f, -1.0f, 3.0f, 2.0f};
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    ctx.seed = seed;
    EXPECT_EQ(sampler.sample(logits, ctx).token, 1);
  }
  EXPECT_EQ(Sampler::argmax(std::vector<float>{-kInf, -kInf}), -1);
}

TEST(Sampler, ProcessorsApplyBiasBansAndPenaltiesAsDefined) {
  SamplingParams p;
  p.logit_bias = {{1, 1.5f}};
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  PenaltyState history;
  const std::vector<std::int32_t> prompt = {2, 3};
  history.reset(prompt);
  history.add_output(3);
  history.add_output(4);
  history.add_output(4);
  const std::vector<std::int32_t> banned = {5};
  SampleContext ctx;
  ctx.params = &p;
  ctx.history = &history;
  ctx.banned = banned;
  std::vector<float> x = {1.0f, 1.0f, 4.0f, -2.0f, 3.0f, 9.0f, 1.0f};
  Sampler::apply_processors(x, ctx);
  EXPECT_FLOAT_EQ(x[0], 1.0f);                         // untouched
  EXPECT_FLOAT_EQ(x[1], 2.5f);                         // bias only
  EXPECT_FLOAT_EQ(x[2], 2.0f);                         // prompt token, positive: divided
  EXPECT_FLOAT_EQ(x[3], -4.0f - 0.5f - 0.25f);         // seen, negative: multiplied; once in output
  EXPECT_FLOAT_EQ(x[4], 1.5f - 2 * 0.5f - 0.25f);      // twice in output
  EXPECT_EQ(x[5], -kInf);                              // banned (min_tokens)
  EXPECT_FLOAT_EQ(x[6], 1.0f);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  Sampler sampler(6);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 2;
  p.logit_bias = {{5, 50.0f}};  // forces token 5, whose raw logit is not the best
  SampleContext ctx;
  ctx.params = &p;
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  const SampleResult r = sampler.sample(logits, ctx);
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  EXPECT_EQ(r.token, 5);
  EXPECT_NEAR(r.logprob, 0.5 - std::log(z), 1e-6);
  EXPECT_EQ(r.rank, 5);  // four raw logits are higher
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 1);  // tie 1 / 3: lower id first
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_NEAR(r.top[0].logprob, 3.0 - std::log(z), 1e-6);
}

TEST(Sampler, AllMaskedRowFallsBackWithoutFailing) {
  Sampler sampler(3);
  SamplingParams p;
  const std::vector<std::int32_t> banned = {0, 1, 2};
  SampleContext ctx;
  ctx.params = &p;
  ctx.banned = banned;
  EXPECT_EQ(sampler.sample(std::vector<float>{0.0f, 2.0f, 1.0f}, ctx).token, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(sampler.sample(std::vector<float>{nan, nan, nan}, ctx).token, 0);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SampleContext plain;
  plain.params = &greedy;
  EXPECT_EQ(sampler.sample(std::vector<float>{nan, nan, nan}, plain).token, 0);
}

}  // namespace
}  // namespace deepinfer::engine
