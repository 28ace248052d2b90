// CUDA parity of the tensor-core lightning-indexer scores (indexer_mma_kernels.cu, prefill-sized steps):
// against the CPU op over head counts, dims, paged keys, per-token key ranges and a width past every
// count; a token's scores are the same bits alone and inside a batch; the launch repeats its bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

// -inf entries must match exactly, the finite rest within `tol` (relative to the finite norm).
void expect_indexer_scores_match(const Tensor& got_host, const Tensor& want, double tol) {
  ASSERT_EQ(got_host.numel(), want.numel());
  Tensor g = got_host.clone(), w = want.clone();
  float* gp = g.data<float>();
  float* wp = w.data<float>();
  for (std::int64_t i = 0; i < w.numel(); ++i) {
    if (std::isinf(wp[i]) || std::isinf(gp[i])) {
      ASSERT_EQ(gp[i], wp[i]) << "element " << i;
      gp[i] = wp[i] = 0.0f;
    }
  }
  const double err = rel_error(g, w);
  EXPECT_LE(err, tol) << "relative error " << err;
}

struct IndexerCase {
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t d;
  std::int64_t max_keys;
};

TEST(CudaParity, IndexerMmaScoresMatchCpuAndRepeatTheirBits) {
  DEEPINFER_REQUIRE_GPU();
  CudaBackendOptions o;
  o.indexer_mma_min_tokens = 1;  // the tensor-core kernel at every size
  auto mma = make_cuda_backend(o);
  Backend& b = *mma;
  for (const IndexerCase& c : std::vector<IndexerCase>{{1, 64, 128, 500}, {40, 64, 128, 700}, {300, 64, 128, 130},
                                                       {33, 16, 64, 65}, {7, 128, 256, 200}}) {
    SCOPED_TRACE(testing::Message() << c.tokens << " tokens, " << c.heads << " heads, d " << c.d << ", up to "
                                    << c.max_keys << " keys");
    const Tensor q = random_tensor({c.tokens, c.heads, c.d}, 41, 1.0f, DType::kBF16);
    const Tensor pool = random_tensor({1024, c.d}, 42, 1.0f, DType::kBF16);
    std::vector<std::int32_t> page_ids(16);
    for (int i = 0; i < 16; ++i) page_ids[static_cast<std::size_t>(i)] = (i * 5) % 16;
    const RowView keys{pool, i32_tensor({16}, page_ids), 64, 1024};
    const Tensor w = random_tensor({c.tokens, c.heads}, 43);
    std::vector<std::int32_t> base(static_cast<std::size_t>(c.tokens)), count(static_cast<std::size_t>(c.tokens));
    for (std::int64_t i = 0; i < c.tokens; ++i) {
      // a prefill's causal key counts, plus a token without keys and bases that differ per token
      base[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 29) % 300);
      count[static_cast<std::size_t>(i)] =
          i % 11 == 5 ? 0 : static_cast<std::int32_t>(std::max<std::int64_t>(1, c.max_keys - (c.tokens - 1 - i) % c.max_keys));
    }
    const Tensor row_base = i32_tensor({c.tokens}, base), counts = i32_tensor({c.tokens}, count);
    const std::int64_t width = c.max_keys + 3;
    Tensor want = Tensor::empty({c.tokens, width}, DType::kF32);
    backend().indexer_scores(q, keys, row_base, counts, w, want);
    const Tensor gq = to_gpu(q, b), gb = to_gpu(row_base, b), gc = to_gpu(counts, b), gw = to_gpu(w, b);
    const RowView gk = to_gpu(keys, b);
    Tensor got = poisoned({c.tokens, width}, DType::kF32, b), again = poisoned({c.tokens, width}, DType::kF32, b);
    b.indexer_scores(gq, gk, gb, gc, gw, got);
    b.indexer_scores(gq, gk, gb, gc, gw, again);
    const Tensor h = to_host(got, b), h2 = to_host(again, b);
    expect_indexer_scores_match(h, want, 1e-4);
    EXPECT_EQ(std::memcmp(h.raw_data(), h2.raw_data(), static_cast<std::size_t>(h.nbytes())), 0);
    // The last token alone: the same bits as in the batch.
    const std::int64_t last = c.tokens - 1;
    Tensor one = poisoned({1, width}, DType::kF32, b);
    b.indexer_scores(to_gpu(q.narrow(0, last, 1), b), gk, to_gpu(row_base.narrow(0, last, 1), b),
                     to_gpu(counts.narrow(0, last, 1), b), to_gpu(w.narrow(0, last, 1), b), one);
    const std::vector<float> all = values(h);
    expect_bits_equal(values(to_host(one, b)), {all.end() - width, all.end()});
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
