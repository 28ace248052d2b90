// The KV compressor against a whole-sequence transcription of MODEL_SPEC A4.4 (HCA pooling and
// CSA overlap pooling), its incremental contract (any split of the tokens gives the same bits) and
// its batch contract (sequences in other slots, padding rows and batch order change nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

CompressorState fresh_state(int ratio, bool overlap, std::int64_t width, std::int64_t slots = 1) {
  const std::int64_t rows = (overlap ? 2 : 1) * ratio * slots;
  CompressorState s{Tensor::zeros(Shape{rows, width}, DType::kF32), Tensor::empty(Shape{rows, width}, DType::kF32),
                    ratio, overlap};
  backend().fill(s.score, -INFINITY);
  return s;
}

Tensor i32_range(std::int64_t first, std::int64_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(first + i);
  return test::i32_tensor(Shape{n}, v);
}

// The rows of `out` whose token completed a group (position p with (p + 1) % ratio == 0).
void append_completed(const Tensor& out, std::span<const std::int32_t> positions, int ratio, std::vector<float>& all) {
  const auto v = values(out);
  const std::int64_t d = out.dim(1);
  for (std::size_t t = 0; t < positions.size(); ++t)
    if ((positions[t] + 1) % ratio == 0)
      all.insert(all.end(), v.begin() + static_cast<std::ptrdiff_t>(t) * d, v.begin() + static_cast<std::ptrdiff_t>(t + 1) * d);
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
    Tensor out = Tensor::empty(Shape{n, d}, DType::kF32);
    const Tensor positions = i32_range(p, n);
    backend().compressor_update(kv.narrow(0, p, n), score.narrow(0, p, n), ape, positions,
                                test::i32_tensor(Shape{n}, std::vector<std::int32_t>(static_cast<std::size_t>(n), 0)),
                                state, out);
    append_completed(out, {positions.data<std::int32_t>(), static_cast<std::size_t>(n)}, ratio, all);
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

// Three sequences in slots 2, 0 and 3 of a 4-slot pool advance together in chunks of different
// lengths, with padding rows (slot -1) between them: each gets the bits it gets alone.
TEST(Compressor, BatchedSequencesMatchEachAloneAndPaddingWritesNothing) {
  for (bool overlap : {false, true}) {
    const int ratio = overlap ? 4 : 8;
    const std::int64_t width = 8, d = overlap ? 4 : 8;
    const Tensor ape = random_tensor(Shape{ratio, width}, 20);
    const std::int64_t len = 37;
    std::vector<Tensor> kv, sc;
    std::vector<std::vector<float>> alone, batched(3);
    for (int s = 0; s < 3; ++s) {
      kv.push_back(random_tensor(Shape{len, width}, 21 + s));
      sc.push_back(random_tensor(Shape{len, width}, 31 + s, 2.0f));
      alone.push_back(run_split(kv[s], sc[s], ape, ratio, overlap, len));
    }
    CompressorState pool = fresh_state(ratio, overlap, width, 4);
    const std::int32_t slot_of[3] = {2, 0, 3};
    const std::int64_t step_len[3] = {5, 1, 9};
    std::int64_t done[3] = {0, 0, 0};
    while (done[0] < len || done[1] < len || done[2] < len) {
      std::vector<std::int32_t> positions, slots;
      std::vector<Tensor> kv_parts, sc_parts;
      for (int s = 0; s < 3; ++s) {
        const std::int64_t n = std::min(step_len[s], len - done[s]);
        for (std::int64_t i = 0; i < n; ++i) {
          positions.push_back(static_cast<std::int32_t>(done[s] + i));
          slots.push_back(slot_of[s]);
        }
        if (n > 0) {
          kv_parts.push_back(kv[s].narrow(0, done[s], n));
          sc_parts.push_back(sc[s].narrow(0, done[s], n));
        }
        positions.push_back(0);  // a padding row after every sequence
        slots.push_back(-1);
        kv_parts.push_back(random_tensor(Shape{1, width}, 99));
        sc_parts.push_back(random_tensor(Shape{1, width}, 98));
      }
      const auto rows = static_cast<std::int64_t>(positions.size());
      Tensor kv_all = Tensor::empty(Shape{rows, width}, DType::kF32), sc_all = kv_all.clone();
      std::int64_t r = 0;
      for (std::size_t i = 0; i < kv_parts.size(); ++i) {
        Tensor kdst = kv_all.narrow(0, r, kv_parts[i].dim(0)), sdst = sc_all.narrow(0, r, kv_parts[i].dim(0));
        backend().copy(kv_parts[i], kdst);
        backend().copy(sc_parts[i], sdst);
        r += kv_parts[i].dim(0);
      }
      Tensor out = Tensor::empty(Shape{rows, d}, DType::kF32);
      backend().compressor_update(kv_all, sc_all, ape, test::i32_tensor(Shape{rows}, positions),
                                  test::i32_tensor(Shape{rows}, slots), pool, out);
      const auto ov = values(out);
      for (std::int64_t t = 0; t < rows; ++t) {
        const auto s = static_cast<std::size_t>(t);
        const int seq = slots[s] == 2 ? 0 : slots[s] == 0 ? 1 : slots[s] == 3 ? 2 : -1;
        const bool complete = seq >= 0 && (positions[s] + 1) % ratio == 0;
        for (std::int64_t c = 0; c < d; ++c) {
          const float v = ov[static_cast<std::size_t>(t * d + c)];
          if (complete) batched[static_cast<std::size_t>(seq)].push_back(v);
          else EXPECT_EQ(v, 0.0f) << "row " << t << " completes no group";
        }
      }
      for (int s = 0; s < 3; ++s) done[s] += std::min(step_len[s], len - done[s]);
    }
    for (int s = 0; s < 3; ++s) test::expect_bits_equal(batched[static_cast<std::size_t>(s)], alone[static_cast<std::size_t>(s)]);
  }
}

TEST(Compressor, RejectsAnOutputOfTheWrongSizeAndASlotOutsideThePool) {
  CompressorState state = fresh_state(4, false, 3);
  const Tensor kv = random_tensor(Shape{4, 3}, 10);
  const Tensor ape = random_tensor(Shape{4, 3}, 11);
  Tensor out = Tensor::empty(Shape{3, 3}, DType::kF32);
  const Tensor zeros = test::i32_tensor(Shape{4}, {0, 0, 0, 0});
  EXPECT_THROW(backend().compressor_update(kv, kv, ape, i32_range(0, 4), zeros, state, out), Error);
  Tensor good = Tensor::empty(Shape{4, 3}, DType::kF32);
  EXPECT_THROW(backend().compressor_update(kv, kv, ape, i32_range(0, 4), test::i32_tensor(Shape{4}, {0, 0, 1, 0}),
                                           state, good),
               Error);
}

}  // namespace
}  // namespace deepinfer::ops
