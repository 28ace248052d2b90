// The KV compressor against a whole-sequence transcription of MODEL_SPEC A4.4 (HCA pooling and
// CSA overlap pooling), and its incremental contract: any split of the tokens gives the same bits.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

CompressorState fresh_state(int ratio, bool overlap, std::int64_t width) {
  const std::int64_t rows = (overlap ? 2 : 1) * ratio;
  CompressorState s{Tensor::zeros(Shape{rows, width}, DType::kF32), Tensor::empty(Shape{rows, width}, DType::kF32),
                    ratio, overlap};
  backend().fill(s.score, -INFINITY);
  return s;
}

// Entry j pools tokens of group j (and, with overlap, the first halves of group j-1).
std::vector<double> naive_entries(const Tensor& kv, const Tensor& score, const Tensor& ape, int ratio, bool overlap) {
  const std::int64_t t_count = kv.dim(0), width = kv.dim(1), d = overlap ? width / 2 : width;
  const auto kvv = values(kv), sv = values(score), av = values(ape);
  std::vector<double> out;
  for (std::int64_t j = 0; (j + 1) * ratio <= t_count; ++j) {
    for (std::int64_t c = 0; c < d; ++c) {
      std::vector<std::pair<double, double>> slots;  // (score, value)
      if (overlap && j > 0)
        for (int i = 0; i < ratio; ++i) {
          const std::int64_t t = (j - 1) * ratio + i;
          slots.push_back({sv[t * width + c] + av[i * width + c], kvv[t * width + c]});
        }
      for (int i = 0; i < ratio; ++i) {
        const std::int64_t t = j * ratio + i;
        const std::int64_t col = overlap ? d + c : c;
        slots.push_back({sv[t * width + col] + av[i * width + col], kvv[t * width + col]});
      }
      double mx = -INFINITY, sum = 0, acc = 0;
      for (auto& s : slots) mx = std::max(mx, s.first);
      for (auto& s : slots) sum += std::exp(s.first - mx);
      for (auto& s : slots) acc += std::exp(s.first - mx) / sum * s.second;
      out.push_back(acc);
    }
  }
  return out;
}

std::vector<float> run_split(const Tensor& kv, const Tensor& score, const Tensor& ape, int ratio, bool overlap,
                             std::int64_t chunk) {
  const std::int64_t t_count = kv.dim(0), width = kv.dim(1), d = overlap ? width / 2 : width;
  CompressorState state = fresh_state(ratio, overlap, width);
  std::vector<float> all;
  for (std::int64_t p = 0; p < t_count; p += chunk) {
    const std::int64_t n = std::min(chunk, t_count - p);
    const std::int64_t complete = (p + n) / ratio - p / ratio;
    Tensor out = Tensor::empty(Shape{complete, d}, DType::kF32);
    backend().compressor_update(kv.narrow(0, p, n), score.narrow(0, p, n), ape, p, state, out);
    const auto v = values(out);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

TEST(Compressor, HcaPoolsEachGroupWithAChannelwiseSoftmax) {
  const int ratio = 8;
  const Tensor kv = random_tensor(Shape{35, 6}, 1), score = random_tensor(Shape{35, 6}, 2, 2.0f);
  const Tensor ape = random_tensor(Shape{ratio, 6}, 3);
  const auto got = run_split(kv, score, ape, ratio, false, 35);
  ASSERT_EQ(got.size(), 4u * 6u);
  test::expect_near_rel(got, naive_entries(kv, score, ape, ratio, false), 1e-6);
}

TEST(Compressor, CsaOverlapPoolsThePreviousGroupsFirstHalves) {
  const int ratio = 4;
  const Tensor kv = random_tensor(Shape{23, 2 * 5}, 4), score = random_tensor(Shape{23, 10}, 5, 2.0f);
  const Tensor ape = random_tensor(Shape{ratio, 10}, 6);
  const auto got = run_split(kv, score, ape, ratio, true, 23);
  ASSERT_EQ(got.size(), 5u * 5u);
  test::expect_near_rel(got, naive_entries(kv, score, ape, ratio, true), 1e-6);
}

TEST(Compressor, AnySplitOfTheTokensGivesTheSameEntries) {
  for (bool overlap : {false, true}) {
    const int ratio = overlap ? 4 : 8;
    const Tensor kv = random_tensor(Shape{41, 8}, 7), score = random_tensor(Shape{41, 8}, 8);
    const Tensor ape = random_tensor(Shape{ratio, 8}, 9);
    const auto whole = run_split(kv, score, ape, ratio, overlap, 41);
    for (std::int64_t chunk : {1, 3, 4, 5, 16, 17}) test::expect_bits_equal(run_split(kv, score, ape, ratio, overlap, chunk), whole);
  }
}

TEST(Compressor, RejectsAnOutputOfTheWrongSize) {
  CompressorState state = fresh_state(4, false, 3);
  const Tensor kv = random_tensor(Shape{4, 3}, 10);
  Tensor out = Tensor::empty(Shape{0, 3}, DType::kF32);
  EXPECT_THROW(backend().compressor_update(kv, kv, random_tensor(Shape{4, 3}, 11), 0, state, out), Error);
}

}  // namespace
}  // namespace deepinfer::ops
