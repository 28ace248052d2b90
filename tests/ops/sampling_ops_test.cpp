// The sampling op's CPU reference against the engine's host Sampler (same token, same logprob
// bits, over many seeds and every parameter combination), and the shared sampling arithmetic
// (own log / exp / Philox) against libm and the engine's Philox.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/philox.h"
#include "engine/sampler.h"
#include "ops/backend.h"
#include "ops/sampling_math.h"
#include "ops/sampling_cases.h"

namespace deepinfer::ops::test {
namespace {

namespace sm = sampling;

float bits_float(std::int32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Runs the engine Sampler on row r of the batch, as the engine would (raw bans first).
engine::SampleResult sampler_row(SamplingBatch& b, std::int32_t r, engine::Sampler& sampler) {
  const SampleRow& row = b.rows[static_cast<std::size_t>(r)];
  std::vector<float> raw(b.logits.begin() + static_cast<std::ptrdiff_t>(r) * b.vocab,
                         b.logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * b.vocab);
  for (std::int32_t i = row.raw_ban_begin; i < row.raw_ban_end; ++i)
    raw[static_cast<std::size_t>(b.entries[static_cast<std::size_t>(i)].id)] = -INFINITY;
  engine::SamplingParams p;
  p.temperature = row.temperature;
  p.top_p = row.top_p;
  p.top_k = row.top_k;
  p.min_p = row.min_p;
  p.repetition_penalty = row.repetition_penalty;
  p.frequency_penalty = row.frequency_penalty;
  p.presence_penalty = row.presence_penalty;
  p.logit_bias = b.bias[static_cast<std::size_t>(r)];
  if (row.num_top_logprobs >= 0) p.logprobs = row.num_top_logprobs;
  engine::PenaltyState history;
  history.reset(b.prompt[static_cast<std::size_t>(r)]);
  for (std::int32_t t : b.outputs[static_cast<std::size_t>(r)]) history.add_output(t);
  engine::SampleContext ctx;
  ctx.params = &p;
  ctx.seed = (static_cast<std::uint64_t>(row.seed_hi) << 32) | row.seed_lo;
  ctx.position = row.position;
  ctx.history = &history;
  ctx.banned = b.bans[static_cast<std::size_t>(r)];
  if (row.mask_row >= 0) {
    ctx.allowed = std::span<const std::uint32_t>(b.masks).subspan(static_cast<std::size_t>(row.mask_row) * b.words(),
                                                                   static_cast<std::size_t>(b.words()));
  }
  return sampler.sample(raw, ctx);
}

void expect_matches_sampler(SamplingBatch& b, const std::vector<std::int32_t>& out, const char* what) {
  engine::Sampler sampler(b.vocab);
  const std::int32_t width = sample_out_words(b.max_top);
  for (std::int32_t r = 0; r < b.num_rows(); ++r) {
    const std::int32_t* o = out.data() + static_cast<std::size_t>(r) * width;
    const engine::SampleResult want = sampler_row(b, r, sampler);
    const SampleRow& row = b.rows[static_cast<std::size_t>(r)];
    SCOPED_TRACE(testing::Message() << what << " row " << r << " temperature " << row.temperature << " top_k "
                                    << row.top_k << " top_p " << row.top_p << " min_p " << row.min_p);
    ASSERT_EQ(o[kSampleOutToken], want.token);
    if (row.num_top_logprobs < 0) continue;
    EXPECT_EQ(o[kSampleOutRank], want.rank);
    EXPECT_EQ(bits_float(o[kSampleOutLogprob]), want.logprob);
    ASSERT_EQ(static_cast<std::int32_t>(want.top.size()), std::min(row.num_top_logprobs, b.vocab));
    for (std::int32_t i = 0; i < b.max_top; ++i) {
      if (static_cast<std::size_t>(i) >= want.top.size()) {
        EXPECT_EQ(o[kSampleOutFixed + i], -1) << "top " << i << " past the list";
        continue;
      }
      EXPECT_EQ(o[kSampleOutFixed + i], want.top[static_cast<std::size_t>(i)].token) << "top " << i;
      EXPECT_EQ(bits_float(o[kSampleOutFixed + b.max_top + i]), want.top[static_cast<std::size_t>(i)].logprob);
    }
  }
}

std::vector<std::int32_t> run_cpu_op(SamplingBatch& b) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::vector<std::int32_t> out(static_cast<std::size_t>(b.num_rows()) * sample_out_words(b.max_top), -7);
  Tensor out_t = Tensor::view_of(out.data(), Shape{b.num_rows(), sample_out_words(b.max_top)}, DType::kI32, nullptr);
  cpu->sample_tokens(b.logits_tensor(), b.rows_tensor(), b.entries_tensor(), b.masks_tensor(), out_t);
  return out;
}

TEST(SamplingOp, CpuOpPicksTheSamplersTokenAndLogprobsOverManySeeds) {
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    const std::int32_t vocab = seed % 3 == 0 ? 5 : (seed % 3 == 1 ? 77 : 700);
    SamplingBatch b = make_sampling_batch(seed, vocab, 12);
    expect_matches_sampler(b, run_cpu_op(b), "seed");
    if (HasFatalFailure()) return;
  }
}

TEST(SamplingOp, CpuOpMatchesTheSamplerAtDeepSeekVocabulary) {
  SamplingBatch b = make_sampling_batch(1234, 129280, 6, 20);
  expect_matches_sampler(b, run_cpu_op(b), "full vocab");
}

// The cases the device's top-p cut must get right (ties at the cut, top_p tiny or just below 1,
// tails whose masses truncate to 0, greedy rows among sampled ones) hold on the host first.
TEST(SamplingOp, CpuOpMatchesTheSamplerOnTopPCuts) {
  const std::int32_t vocabs[] = {1, 3, 257, 4097};
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    SamplingBatch b = make_top_p_batch(seed + 500, vocabs[seed % 4], 15);
    expect_matches_sampler(b, run_cpu_op(b), "top-p");
    if (HasFatalFailure()) return;
  }
  SamplingBatch b = make_top_p_batch(99, 129280, 5, 20);
  expect_matches_sampler(b, run_cpu_op(b), "top-p full vocab");
}

TEST(SamplingOp, SameSeedAndPositionGiveTheSameTokenWhateverTheBatch) {
  SamplingBatch b = make_sampling_batch(7, 300, 9);
  const std::vector<std::int32_t> all = run_cpu_op(b);
  const std::int32_t width = sample_out_words(b.max_top);
  for (std::int32_t r = 0; r < b.num_rows(); ++r) {
    SamplingBatch one = b;
    one.rows = {b.rows[static_cast<std::size_t>(r)]};
    one.logits.assign(b.logits.begin() + static_cast<std::ptrdiff_t>(r) * b.vocab,
                      b.logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * b.vocab);
    if (one.rows[0].mask_row >= 0) {
      one.masks.assign(b.masks.begin() + static_cast<std::ptrdiff_t>(one.rows[0].mask_row) * b.words(),
                       b.masks.begin() + static_cast<std::ptrdiff_t>(one.rows[0].mask_row + 1) * b.words());
      one.num_masks = 1;
      one.rows[0].mask_row = 0;
    }
    const std::vector<std::int32_t> single = run_cpu_op(one);
    EXPECT_TRUE(std::equal(single.begin(), single.end(), all.begin() + static_cast<std::ptrdiff_t>(r) * width))
        << "row " << r;
  }
}

TEST(SamplingOp, RejectsEntriesOutsideTheVocabulary) {
  SamplingBatch b = make_sampling_batch(3, 40, 2);
  b.entries.push_back({40, 1.0f});
  b.rows[0].bias_begin = static_cast<std::int32_t>(b.entries.size()) - 1;
  b.rows[0].bias_end = static_cast<std::int32_t>(b.entries.size());
  EXPECT_THROW(run_cpu_op(b), Error);
}

// The ops a step launched ahead of its predecessor's tokens uses: placeholder ids from earlier
// samples, and the pending token joining a row's seen / count lists through their reserved entry.
TEST(SamplingOp, EarlierSamplesResolveIdsAndJoinPenaltyHistories) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::int64_t width = sample_out_words(2);
  std::vector<std::int32_t> sampled_host = {7, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0};  // tokens 7 and 5
  const Tensor sampled = Tensor::view_of(sampled_host.data(), Shape{2, width}, DType::kI32, nullptr);
  std::vector<std::int32_t> ids_host = {11, -2, -1, 0, -3};
  Tensor ids = Tensor::view_of(ids_host.data(), Shape{5}, DType::kI32, nullptr);
  cpu->resolve_sampled_ids(ids, sampled);
  EXPECT_EQ(ids_host, (std::vector<std::int32_t>{11, 5, 7, 0, 0}));  // row 2 does not exist: 0

  // Row 0 waits for 7 (already seen, no count yet), row 1 for 5 (unseen, counted twice), row 2 for
  // nothing; row 3 for 7 with an empty seen list (no repetition penalty).
  std::vector<SampleEntry> entries = {{3, 0}, {7, 0}, {-1, 0},    // row 0 seen
                                      {3, 2}, {9, 1}, {-1, 0},    // row 0 counts
                                      {4, 0}, {-1, 0},            // row 1 seen
                                      {5, 2}, {-1, 0},            // row 1 counts
                                      {8, 0},                     // row 2 seen (no reserved entry)
                                      {1, 1}, {-1, 0}};           // row 3 counts
  std::vector<SampleRow> rows(4);
  rows[0].seen_begin = 0, rows[0].seen_end = 3, rows[0].count_begin = 3, rows[0].count_end = 6;
  rows[1].seen_begin = 6, rows[1].seen_end = 8, rows[1].count_begin = 8, rows[1].count_end = 10;
  rows[2].seen_begin = 10, rows[2].seen_end = 11;
  rows[3].count_begin = 11, rows[3].count_end = 13;
  std::vector<std::int32_t> sources_host = {0, 1, -1, 0};
  Tensor rows_t = Tensor::view_of(rows.data(), Shape{4, kSampleRowWords}, DType::kI32, nullptr);
  Tensor entries_t = Tensor::view_of(entries.data(), Shape{13, 2}, DType::kI32, nullptr);
  const Tensor sources = Tensor::view_of(sources_host.data(), Shape{4}, DType::kI32, nullptr);
  cpu->add_sampled_to_history(rows_t, entries_t, sources, sampled);
  EXPECT_EQ(rows[0].seen_end, 2);  // 7 was seen: the reserved entry is dropped
  EXPECT_EQ(rows[0].count_end, 6);
  EXPECT_EQ(entries[5].id, 7);  // a first count of 7
  EXPECT_EQ(entries[5].value, 1.0f);
  EXPECT_EQ(rows[1].seen_end, 8);
  EXPECT_EQ(entries[7].id, 5);  // 5 joins the seen list
  EXPECT_EQ(rows[1].count_end, 9);  // 5 was counted: its count grows, the reserved entry goes
  EXPECT_EQ(entries[8].value, 3.0f);
  EXPECT_EQ(rows[2].seen_end, 11);  // no source: untouched
  EXPECT_EQ(entries[10].id, 8);
  EXPECT_EQ(rows[3].seen_end, 0);
  EXPECT_EQ(entries[12].id, 7);
  EXPECT_EQ(entries[12].value, 1.0f);
}

TEST(SamplingMath, OwnLogAndExpAreWithinAnUlpOfLibm) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> exponent(-40.0, 40.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = std::exp2(exponent(rng));
    const double want = std::log(x);
    EXPECT_LE(std::abs(sm::log(x) - want), 4.5e-16 * std::max(1.0, std::abs(want))) << x;
    const double y = -exponent(rng) * 17.0;
    const double e = std::exp(y);
    EXPECT_LE(std::abs(sm::exp(y) - e), 4.5e-16 * e) << y;
  }
  EXPECT_EQ(sm::log(1.0), 0.0);
  EXPECT_EQ(sm::exp(0.0), 1.0);
  EXPECT_EQ(sm::exp(-INFINITY), 0.0);
  EXPECT_EQ(sm::log(0.0), -INFINITY);
  EXPECT_TRUE(std::isnan(sm::log(-1.0)));
}

TEST(SamplingMath, PhiloxMatchesTheEnginesAndGumbelIsMonotoneUpToItsBoundMargin) {
  for (std::uint32_t i = 0; i < 5000; ++i) {
    const std::uint64_t seed = 0x123456789ull * (i + 1);
    const engine::PhiloxCounter want = engine::philox_block(seed, i * 7, engine::RandomPurpose::kTokenSample, i);
    const sm::Philox4 got = sm::token_noise_block(seed, i * 7, i);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(got.v[j], want[static_cast<std::size_t>(j)]);
  }
  double prev = sm::gumbel_from_bits(0);
  for (std::uint64_t bits = 1; bits <= 0xFFFFFFFFull; bits += 65521) {
    const double g = sm::gumbel_from_bits(static_cast<std::uint32_t>(bits));
    EXPECT_GE(g, prev - 1e-12) << bits;
    prev = g;
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
