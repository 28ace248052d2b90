// CUDA sampling op against the CPU reference op: the same token, rank, logprob bits and top list
// for every row, over many seeds, vocabulary sizes and batch sizes (the device must pick exactly
// what the host Sampler picks; tests/ops/sampling_ops_test.cpp ties the CPU op to the Sampler).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>

#include "ops/parity_util.h"
#include "ops/sampling_cases.h"

namespace deepinfer::ops::test {
namespace {

std::vector<std::int32_t> sample_on(Backend& be, SamplingBatch& b, bool device) {
  const std::int64_t width = sample_out_words(b.max_top);
  std::vector<std::int32_t> out(static_cast<std::size_t>(b.num_rows() * width), -7);
  Tensor host_out = Tensor::view_of(out.data(), Shape{b.num_rows(), width}, DType::kI32, nullptr);
  if (!device) {
    be.sample_tokens(b.logits_tensor(), b.rows_tensor(), b.entries_tensor(), b.masks_tensor(), host_out);
    return out;
  }
  const Tensor logits = to_gpu(b.logits_tensor(), be);
  const Tensor rows = to_gpu(b.rows_tensor(), be);
  const Tensor entries = b.entries.empty() ? be.empty(Shape{0, 2}, DType::kI32) : to_gpu(b.entries_tensor(), be);
  const Tensor masks = b.num_masks == 0 ? be.empty(Shape{0, b.words()}, DType::kI32) : to_gpu(b.masks_tensor(), be);
  Tensor dev_out = be.empty(Shape{b.num_rows(), width}, DType::kI32);
  be.sample_tokens(logits, rows, entries, masks, dev_out);
  be.copy(dev_out, host_out);
  be.synchronize();
  return out;
}

// The sampler with each histogram fill (CudaBackendOptions::sampler_histogram_fill: one 64-bit atomic per
// id, per-thread runs of 32-bit adds (the default)): every fill must give the CPU op's bits.
constexpr int kHistogramFills = 2;
Backend& gpu_with_fill(int fill) {
  static std::unique_ptr<Backend> backends[kHistogramFills];
  if (!backends[fill]) {
    CudaBackendOptions options;
    options.sampler_histogram_fill = fill;
    backends[fill] = make_cuda_backend(options);
  }
  return *backends[fill];
}

void expect_same(const SamplingBatch& b, const std::vector<std::int32_t>& want, const std::vector<std::int32_t>& got) {
  const std::int32_t width = sample_out_words(b.max_top);
  for (std::int32_t r = 0; r < b.num_rows(); ++r) {
    const SampleRow& row = b.rows[static_cast<std::size_t>(r)];
    const std::int32_t used = row.num_top_logprobs < 0 ? 1 : width;  // rank/logprob words only when asked
    for (std::int32_t i = 0; i < used; ++i) {
      const auto k = static_cast<std::size_t>(r * width + i);
      ASSERT_EQ(got[k], want[k]) << "row " << r << " word " << i << " (vocab " << b.vocab << ", temperature "
                                 << row.temperature << ", top_k " << row.top_k << ", top_p " << row.top_p
                                 << ", min_p " << row.min_p << ", logprobs " << row.num_top_logprobs << ")";
    }
  }
}

// The CPU op's bits from gpu() and from every histogram fill.
void expect_cpu_bits_with_every_fill(Backend& cpu, SamplingBatch& b) {
  const std::vector<std::int32_t> want = sample_on(cpu, b, false);
  expect_same(b, want, sample_on(gpu(), b, true));
  for (int fill = 0; fill < kHistogramFills && !testing::Test::HasFatalFailure(); ++fill) {
    SCOPED_TRACE(testing::Message() << "sampler_histogram_fill " << fill);
    expect_same(b, want, sample_on(gpu_with_fill(fill), b, true));
  }
}

// make(seed, vocab, rows) for every pair of a row count (each a cluster split) and a vocabulary,
// with every fill; at the DeepSeek vocabulary only up to `full_vocab_rows` rows (the host
// reference is slow at this size).
template <typename Make>
void check_splits(std::initializer_list<std::int32_t> rows_per_split, std::initializer_list<std::int32_t> vocabs,
                  std::uint64_t seed, std::int32_t full_vocab_rows, Make make) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (const std::int32_t rows : rows_per_split) {
    for (const std::int32_t vocab : vocabs) {
      if (vocab == 129280 && rows > full_vocab_rows) continue;
      SamplingBatch b = make(++seed, vocab, rows);
      expect_cpu_bits_with_every_fill(*cpu, b);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CudaSampling, AnUnknownHistogramFillIsRefusedWhenTheBackendIsMade) {
  DEEPINFER_REQUIRE_GPU();
  CudaBackendOptions options;
  options.sampler_histogram_fill = 2;
  try {
    (void)make_cuda_backend(options);
    FAIL() << "sampler_histogram_fill 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sampler_histogram_fill 2 must be 0 or 1"), std::string::npos) << e.what();
  }
}

TEST(CudaSampling, PicksTheCpuOpsTokensAndLogprobsOverManySeeds) {
  DEEPINFER_REQUIRE_GPU();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (std::uint64_t seed = 0; seed < 80; ++seed) {
    const std::int32_t vocabs[] = {1, 5, 33, 517, 4099};
    const std::int32_t vocab = vocabs[seed % 5];
    SamplingBatch b = make_sampling_batch(seed + 1000, vocab, seed % 7 == 0 ? 1 : 17, 8);
    expect_same(b, sample_on(*cpu, b, false), sample_on(gpu(), b, true));
    if (HasFatalFailure()) return;
  }
}

TEST(CudaSampling, PicksTheCpuOpsTokensAtDeepSeekVocabulary) {
  DEEPINFER_REQUIRE_GPU();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    SamplingBatch b = make_sampling_batch(seed + 77, 129280, 12, 20);
    expect_same(b, sample_on(*cpu, b, false), sample_on(gpu(), b, true));
  }
}

// The kernel splits a row over a cluster of 16, 8, 4, 2 or 1 blocks by batch size (16 up to 8 rows,
// 8 up to 16, 4 up to 32, 2 up to 64): every split gives the CPU op's bits, also where most blocks
// of a cluster hold no ids (small vocabularies), where a block's slice ends mid-row, and on both
// top-k paths (survivors gathered on one block up to k = 1024, row-wide passes above).
TEST(CudaSampling, EveryClusterSplitOfARowPicksTheCpuOpsTokens) {
  DEEPINFER_REQUIRE_GPU();
  const auto make = [](std::uint64_t seed, std::int32_t vocab, std::int32_t rows) {
    SamplingBatch b = make_sampling_batch(seed, vocab, rows, 8);
    // top-k up to 1024 finishes on one block of the cluster; larger k stays on the row-wide passes.
    for (std::size_t r = 0; r < b.rows.size(); r += 3) {
      if (b.rows[r].top_k > 0 && vocab > 1500) b.rows[r].top_k = r % 2 == 0 ? 1024 : 1500;
    }
    return b;
  };
  check_splits({1, 12, 20, 50, 100, 140}, {7, 300, 4099, 129280}, 4000, 20, make);
}

// The top-p cut (three histogram levels over the order keys, ties at the cut resolved by the
// lowest ids) and the top-k gathered path, against the CPU op on odd vocabularies, heavy ties,
// top_p from 1e-6 to the float below 1, tails of zero mass, top-k on both sides of 1024, min-p,
// penalties and greedy rows in the same batch, on every cluster split.
TEST(CudaSampling, TopPCutsMatchTheCpuOpOnTiesTinyAndNearOneTopP) {
  DEEPINFER_REQUIRE_GPU();
  const auto make = [](std::uint64_t seed, std::int32_t vocab, std::int32_t rows) {
    return make_top_p_batch(seed, vocab, rows, 8);
  };
  check_splits({1, 12, 33, 70}, {1, 3, 257, 4097, 20011, 129280}, 7000, 12, make);
}

// Rows whose selects put a block's whole slice on a few histogram bins (a handful of distinct
// logits; bf16-rounded logits, whose last key byte is 0): top-k 50 with top-p, top-p alone and
// top-k above 1024 (the row-wide cut), on every cluster split, with every histogram fill.
TEST(CudaSampling, HeavilyTiedRowsPickTheCpuOpsTokensWithEveryHistogramFill) {
  DEEPINFER_REQUIRE_GPU();
  const auto make = [](std::uint64_t seed, std::int32_t vocab, std::int32_t rows) {
    SamplingBatch b = make_sampling_batch(seed, vocab, rows, 8);
    std::mt19937_64 rng(seed);
    for (std::int32_t r = 0; r < rows; ++r) {
      fill_logits(rng, r % 2 == 0 ? 2 : 1, b.logits.data() + static_cast<std::size_t>(r) * vocab, vocab);
      SampleRow& row = b.rows[static_cast<std::size_t>(r)];
      const std::int32_t ks[] = {50, -1, 1500};
      row.top_k = ks[r % 3];
      row.top_p = r % 4 == 3 ? 0.5f : 0.95f;
      row.temperature = r % 5 == 4 ? 0.7f : 1.0f;
      row.mask_row = -1;
    }
    return b;
  };
  check_splits({1, 12, 33, 70}, {4097, 20011}, 9100, 0, make);
}

// The ops of a step launched ahead (ids from earlier samples, the pending token joining penalty
// histories) give the CPU op's results on the device.
TEST(CudaSampling, EarlierSamplesResolveIdsAndJoinHistoriesAsOnTheCpu) {
  DEEPINFER_REQUIRE_GPU();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::mt19937 rng(3);
  const std::int64_t rows = 37, width = sample_out_words(4);
  std::vector<std::int32_t> sampled_host(static_cast<std::size_t>(rows * width));
  for (std::int32_t& x : sampled_host) x = static_cast<std::int32_t>(rng() % 50);
  const Tensor sampled = Tensor::view_of(sampled_host.data(), Shape{rows, width}, DType::kI32, nullptr);
  std::vector<std::int32_t> ids_host(300);
  for (std::int32_t& x : ids_host) x = static_cast<std::int32_t>(rng() % 100) - 50;  // placeholders -1 .. -50
  std::vector<std::int32_t> ids_cpu = ids_host;
  Tensor ids_cpu_t = Tensor::view_of(ids_cpu.data(), Shape{300}, DType::kI32, nullptr);
  cpu->resolve_sampled_ids(ids_cpu_t, sampled);
  Tensor ids_gpu = to_gpu(Tensor::view_of(ids_host.data(), Shape{300}, DType::kI32, nullptr));
  gpu().resolve_sampled_ids(ids_gpu, to_gpu(sampled));
  std::vector<std::int32_t> back(300);
  Tensor back_t = Tensor::view_of(back.data(), Shape{300}, DType::kI32, nullptr);
  gpu().copy(ids_gpu, back_t);
  EXPECT_EQ(back, ids_cpu);

  // Per row a seen list and a count list of random distinct ids below 50, each with a reserved entry.
  std::vector<SampleRow> row_host(static_cast<std::size_t>(rows));
  std::vector<SampleEntry> entries;
  std::vector<std::int32_t> sources(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    SampleRow& row = row_host[static_cast<std::size_t>(r)];
    sources[static_cast<std::size_t>(r)] = r % 5 == 4 ? -1 : static_cast<std::int32_t>(rng() % rows);
    row.seen_begin = static_cast<std::int32_t>(entries.size());
    for (std::int32_t id = 0; id < 50; ++id)
      if (rng() % 3 == 0) entries.push_back({id, 0.0f});
    entries.push_back({-1, 0.0f});
    row.seen_end = static_cast<std::int32_t>(entries.size());
    row.count_begin = row.seen_end;
    for (std::int32_t id = 0; id < 50; ++id)
      if (rng() % 4 == 0) entries.push_back({id, static_cast<float>(1 + rng() % 5)});
    entries.push_back({-1, 0.0f});
    row.count_end = static_cast<std::int32_t>(entries.size());
  }
  const auto n = static_cast<std::int64_t>(entries.size());
  std::vector<SampleRow> rows_cpu = row_host;
  std::vector<SampleEntry> entries_cpu = entries;
  Tensor rows_cpu_t = Tensor::view_of(rows_cpu.data(), Shape{rows, kSampleRowWords}, DType::kI32, nullptr);
  Tensor entries_cpu_t = Tensor::view_of(entries_cpu.data(), Shape{n, 2}, DType::kI32, nullptr);
  const Tensor sources_t = Tensor::view_of(sources.data(), Shape{rows}, DType::kI32, nullptr);
  cpu->add_sampled_to_history(rows_cpu_t, entries_cpu_t, sources_t, sampled);
  Tensor rows_gpu = to_gpu(Tensor::view_of(row_host.data(), Shape{rows, kSampleRowWords}, DType::kI32, nullptr));
  Tensor entries_gpu = to_gpu(Tensor::view_of(entries.data(), Shape{n, 2}, DType::kI32, nullptr));
  gpu().add_sampled_to_history(rows_gpu, entries_gpu, to_gpu(sources_t), to_gpu(sampled));
  std::vector<std::int32_t> rows_back(static_cast<std::size_t>(rows * kSampleRowWords)), entries_back(static_cast<std::size_t>(2 * n));
  Tensor rows_back_t = Tensor::view_of(rows_back.data(), Shape{rows, kSampleRowWords}, DType::kI32, nullptr);
  Tensor entries_back_t = Tensor::view_of(entries_back.data(), Shape{n, 2}, DType::kI32, nullptr);
  gpu().copy(rows_gpu, rows_back_t);
  gpu().copy(entries_gpu, entries_back_t);
  EXPECT_EQ(std::memcmp(rows_back.data(), rows_cpu.data(), rows_back.size() * 4), 0);
  EXPECT_EQ(std::memcmp(entries_back.data(), entries_cpu.data(), entries_back.size() * 4), 0);
}

// Time per call at the DeepSeek vocabulary with every histogram fill (not a pass/fail check: the numbers go
// to docs/PERFORMANCE_CUDA_OPS.md). The rows' logits are make_sampling_batch's random kinds: from 8 rows on a
// batch holds rows of a handful of distinct values and bf16-rounded rows, whose selects pile onto few bins.
TEST(CudaSampling, TimesTheDeviceSamplerAtDeepSeekVocabulary) {
  DEEPINFER_REQUIRE_GPU();
  // 0: temperature 1 over the full vocabulary; 1: top-k 50 + top-p 0.95; 2: top-p 0.95 alone; 3: greedy;
  // 4: top-p 0.95 alone over a language model's shape of logits (a few ids far above the rest).
  const char* names[] = {"temperature 1 (full vocabulary)", "top_k 50 + top_p 0.95", "top_p 0.95", "greedy",
                         "top_p 0.95 (peaked logits)"};
  for (const int mode : {0, 1, 2, 3, 4}) {
    for (const std::int32_t rows : {1, 8, 32, 128}) {
      SamplingBatch b = make_sampling_batch(5, 129280, rows, 20);
      if (mode == 4) {
        std::mt19937_64 rng(11);
        for (std::int32_t r = 0; r < rows; ++r) fill_logits(rng, 4, b.logits.data() + static_cast<std::size_t>(r) * 129280, 129280);
      }
      for (SampleRow& row : b.rows) {
        row = SampleRow{.temperature = mode == 3 ? 0.0f : 1.0f, .top_p = mode == 1 || mode == 2 || mode == 4 ? 0.95f : 1.0f,
                        .top_k = mode == 1 ? 50 : -1, .seed_lo = row.seed_lo, .position = row.position};
        row.raw_ban_end = 5;
      }
      for (int fill = 0; fill < kHistogramFills; ++fill) {
        Backend* be = &gpu_with_fill(fill);
        const Tensor logits = to_gpu(b.logits_tensor(), *be), rows_t = to_gpu(b.rows_tensor(), *be);
        const Tensor entries = to_gpu(b.entries_tensor(), *be);
        const Tensor masks = be->empty(Shape{0, b.words()}, DType::kI32);
        Tensor out = be->empty(Shape{rows, sample_out_words(b.max_top)}, DType::kI32);
        be->sample_tokens(logits, rows_t, entries, masks, out);
        be->synchronize();
        const int reps = 20;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) be->sample_tokens(logits, rows_t, entries, masks, out);
        be->synchronize();
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
        std::printf("device sampling vocab 129280 rows %d %s%s: %.1f us per call\n", rows, names[mode],
                    fill == 1 ? "" : " [fill 0: 64-bit atomics]", us);
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
