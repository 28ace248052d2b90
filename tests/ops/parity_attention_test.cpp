// CUDA vs CPU parity of the attention-side ops: sparse attention with sinks over several (paged)
// KV sources with skipped indices, decode and prefill shapes; lightning-indexer scores; the
// visibility-masked top-k with ties; the KV compressor fed chunk by chunk.
#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

struct AttnCase {
  std::int64_t tokens, heads, d, k;
  int block;
  bool round_probs;
  DType dtype;
};

void check_attention(const AttnCase& c, Backend& b) {
  SCOPED_TRACE(testing::Message() << "T=" << c.tokens << " H=" << c.heads << " d=" << c.d << " K=" << c.k << " block "
                                  << c.block << " round " << c.round_probs << " " << dtype_name(c.dtype));
  const std::int64_t window_rows = 150, comp_rows = 96;
  const Tensor q = random_tensor({c.tokens, c.heads, c.d}, 21, 1.0f, c.dtype);
  const Tensor window = random_tensor({window_rows, c.d}, 22, 1.0f, c.dtype);
  const Tensor comp_pool = random_tensor({128, c.d}, 23, 1.0f, c.dtype);  // 8 pages of 16
  const Tensor pages = i32_tensor({6}, {7, 2, 5, 0, 3, 6});
  const RowView cpu_sources[2] = {RowView::contiguous(window), RowView{comp_pool, pages, 16, comp_rows}};
  const RowView gpu_sources[2] = {to_gpu(cpu_sources[0], b), to_gpu(cpu_sources[1], b)};
  Tensor idx = random_i32({c.tokens, c.k}, 24, -1, static_cast<std::int32_t>(window_rows + comp_rows - 1));
  if (c.tokens > 1)  // one row with no valid index at all: zero output
    for (std::int64_t j = 0; j < c.k; ++j) idx.data<std::int32_t>()[c.k + j] = -1;
  const Tensor sinks = random_tensor({c.heads}, 25);
  const AttentionOptions options{1.0f / std::sqrt(static_cast<float>(c.d)), c.round_probs, c.block};
  Tensor want = Tensor::empty(q.shape(), c.dtype);
  backend().sparse_attention(q, cpu_sources, idx, sinks, options, want);
  Tensor got = poisoned(q.shape(), c.dtype, b);
  b.sparse_attention(to_gpu(q, b), gpu_sources, to_gpu(idx, b), to_gpu(sinks, b), options, got);
  const double tol = (c.round_probs || c.dtype == DType::kBF16) ? kTolBf16 : 1e-4;
  expect_parity(got, want, tol, b);
}

TEST(CudaParity, SparseAttentionMatchesCpuForDecodeAndPrefill) {
  DEEPINFER_REQUIRE_GPU();
  const std::vector<AttnCase> cases = {
      {1, 64, 512, 640, 64, true, DType::kBF16},  {1, 64, 512, 640, 64, false, DType::kF32},
      {2, 8, 64, 5, 64, false, DType::kF32},      {3, 1, 512, 200, 16, false, DType::kF32},
      {5, 20, 128, 129, 256, true, DType::kF32},  {40, 64, 512, 256, 64, true, DType::kBF16},
      {300, 16, 64, 64, 32, false, DType::kF32}};
  for (const AttnCase& c : cases) check_attention(c, gpu());
  for (const AttnCase& c : cases) check_attention(c, gpu_invariant());  // no split of the index list
}

TEST(CudaParity, IndexerScoresMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t t : {1, 7, 64})
    for (std::int64_t num_keys : {1, 100, 1000}) {
      SCOPED_TRACE(testing::Message() << t << " tokens, " << num_keys << " keys");
      const Tensor q = random_tensor({t, 64, 128}, 31, 1.0f, DType::kBF16);
      const Tensor pool = random_tensor({1024, 128}, 32, 1.0f, DType::kBF16);
      std::vector<std::int32_t> page_ids(16);
      for (int i = 0; i < 16; ++i) page_ids[static_cast<std::size_t>(i)] = (i * 7) % 16;
      const Tensor pages = i32_tensor({16}, page_ids);
      const RowView keys{pool, pages, 64, 1024};
      const Tensor w = random_tensor({t, 64}, 33);
      Tensor want = Tensor::empty({t, num_keys + 3}, DType::kF32);
      backend().indexer_scores(q, keys, num_keys, w, want);
      Tensor got = poisoned({t, num_keys + 3}, DType::kF32);
      gpu().indexer_scores(to_gpu(q), to_gpu(keys), num_keys, to_gpu(w), got);
      expect_parity(got.narrow(1, 0, num_keys), want.narrow(1, 0, num_keys).clone(), 1e-4);
    }
}

TEST(CudaParity, TopkVisibleMatchesCpuIncludingTiesAndShortRows) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t n : {1, 10, 600, 5000})
    for (int k : {1, 16, 512})
      for (bool ties : {false, true}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k << " ties " << ties);
        const std::int64_t t = 9;
        Tensor scores = random_tensor({t, n}, 41, 3.0f);
        if (ties)
          for (std::int64_t i = 0; i < scores.numel(); ++i)
            scores.data<float>()[i] = std::round(scores.data<float>()[i] * 2.0f) / 2.0f;
        const Tensor pos = random_i32({t}, 42, -1, static_cast<std::int32_t>(4 * n + 8));
        Tensor want = Tensor::empty({t, k}, DType::kI32);
        backend().topk_visible(scores, pos, 4, k, 128, want);
        Tensor got = gpu().empty({t, k}, DType::kI32);
        gpu().topk_visible(to_gpu(scores), to_gpu(pos), 4, k, 128, got);
        expect_i32_equal(got, want);
      }
}

TEST(CudaParity, CompressorMatchesCpuAcrossChunkedCalls) {
  DEEPINFER_REQUIRE_GPU();
  struct Flavour {
    int ratio;
    bool overlap;
    std::int64_t d;
  };
  for (const Flavour fl : {Flavour{4, true, 64}, Flavour{128, false, 32}, Flavour{4, true, 512}}) {
    SCOPED_TRACE(testing::Message() << "ratio " << fl.ratio << " overlap " << fl.overlap << " d " << fl.d);
    const std::int64_t coff = fl.overlap ? 2 : 1, width = coff * fl.d;
    const Tensor ape = random_tensor({fl.ratio, width}, 51);
    const Tensor gpu_ape = to_gpu(ape);
    CompressorState cpu_state{Tensor::zeros({coff * fl.ratio, width}, DType::kF32),
                              Tensor::empty({coff * fl.ratio, width}, DType::kF32), fl.ratio, fl.overlap};
    for (std::int64_t i = 0; i < cpu_state.score.numel(); ++i)
      cpu_state.score.data<float>()[i] = -std::numeric_limits<float>::infinity();
    CompressorState gpu_state{to_gpu(cpu_state.kv), to_gpu(cpu_state.score), fl.ratio, fl.overlap};
    std::int64_t pos = 0;
    for (std::int64_t chunk : {7, 1, 1, 130, 3, 300}) {
      const Tensor kv = random_tensor({chunk, width}, static_cast<std::uint32_t>(52 + pos));
      const Tensor score = random_tensor({chunk, width}, static_cast<std::uint32_t>(53 + pos));
      std::int64_t complete = 0;
      for (std::int64_t t = 0; t < chunk; ++t) complete += (pos + t + 1) % fl.ratio == 0 ? 1 : 0;
      Tensor want = Tensor::empty({complete, fl.d}, DType::kF32);
      backend().compressor_update(kv, score, ape, pos, cpu_state, want);
      Tensor got = poisoned({complete, fl.d}, DType::kF32);
      gpu().compressor_update(to_gpu(kv), to_gpu(score), gpu_ape, pos, gpu_state, got);
      if (complete > 0) expect_parity(got, want, 1e-5);
      expect_parity(gpu_state.kv, cpu_state.kv, 0.0);
      pos += chunk;
    }
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
