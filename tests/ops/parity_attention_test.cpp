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

// Parity where the CPU result may hold -inf (masked scores, fresh compressor state): -inf must
// match exactly, the finite rest within `tol`.
void expect_parity_masked(const Tensor& device_result, const Tensor& cpu_result, double tol) {
  Tensor got = to_host(device_result, gpu()).clone();
  Tensor want = cpu_result.clone();
  ASSERT_EQ(got.numel(), want.numel());
  float* g = got.data<float>();
  float* w = want.data<float>();
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      ASSERT_EQ(g[i], w[i]) << "element " << i;
      g[i] = w[i] = 0.0f;
    }
  }
  const double err = rel_error(got, want);
  EXPECT_LE(err, tol) << "relative error " << err;
}

// Each token reads its own key list (row base and count per token, as a batch of sequences does);
// the width past every count is -inf on both.
TEST(CudaParity, IndexerScoresMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t t : {1, 7, 64})
    for (std::int64_t num_keys : {1, 100, 500}) {
      SCOPED_TRACE(testing::Message() << t << " tokens, up to " << num_keys << " keys");
      const Tensor q = random_tensor({t, 64, 128}, 31, 1.0f, DType::kBF16);
      const Tensor pool = random_tensor({1024, 128}, 32, 1.0f, DType::kBF16);
      std::vector<std::int32_t> page_ids(16);
      for (int i = 0; i < 16; ++i) page_ids[static_cast<std::size_t>(i)] = (i * 7) % 16;
      const Tensor pages = i32_tensor({16}, page_ids);
      const RowView keys{pool, pages, 64, 1024};
      const Tensor w = random_tensor({t, 64}, 33);
      std::vector<std::int32_t> base(static_cast<std::size_t>(t)), count(static_cast<std::size_t>(t));
      for (std::int64_t i = 0; i < t; ++i) {
        base[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % 500);
        count[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % 3 == 2 ? 0 : num_keys - (i % 5));
        if (count[static_cast<std::size_t>(i)] < 0) count[static_cast<std::size_t>(i)] = 0;
      }
      const Tensor row_base = i32_tensor({t}, base), counts = i32_tensor({t}, count);
      Tensor want = Tensor::empty({t, num_keys + 3}, DType::kF32);
      backend().indexer_scores(q, keys, row_base, counts, w, want);
      Tensor got = poisoned({t, num_keys + 3}, DType::kF32);
      gpu().indexer_scores(to_gpu(q), to_gpu(keys), to_gpu(row_base), to_gpu(counts), to_gpu(w), got);
      expect_parity_masked(got, want, 1e-4);
    }
}

// The SIMT kernel's staging and float4 dot products on shapes the model does not use: d not a
// multiple of 4, d past the 256-thread stride, a head count that leaves head groups empty.
TEST(CudaParity, IndexerScoresMatchCpuForOddHeadDims) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t heads : {3, 17})
    for (std::int64_t d : {37, 300})
      for (std::int64_t t : {1, 3}) {
        SCOPED_TRACE(testing::Message() << t << " tokens, " << heads << " heads of " << d);
        const Tensor q = random_tensor({t, heads, d}, 34, 1.0f, DType::kBF16);
        const RowView keys = RowView::contiguous(random_tensor({200, d}, 35, 1.0f, DType::kBF16));
        const Tensor w = random_tensor({t, heads}, 36);
        std::vector<std::int32_t> base(static_cast<std::size_t>(t)), count(static_cast<std::size_t>(t));
        for (std::int64_t i = 0; i < t; ++i) {
          base[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i * 11);
          count[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(150 - i * 40);
        }
        const Tensor row_base = i32_tensor({t}, base), counts = i32_tensor({t}, count);
        Tensor want = Tensor::empty({t, 160}, DType::kF32);
        backend().indexer_scores(q, keys, row_base, counts, w, want);
        Tensor got = poisoned({t, 160}, DType::kF32);
        gpu().indexer_scores(to_gpu(q), to_gpu(keys), to_gpu(row_base), to_gpu(counts), to_gpu(w), got);
        expect_parity_masked(got, want, 1e-4);
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
        const Tensor offsets = random_i32({t}, 43, 0, 100000);
        backend().topk_visible(scores, pos, 4, k, offsets, want);
        Tensor got = gpu().empty({t, k}, DType::kI32);
        gpu().topk_visible(to_gpu(scores), to_gpu(pos), 4, k, to_gpu(offsets), got);
        expect_i32_equal(got, want);
      }
}

// Three sequences in slots 2, 0, 1 of a 3-slot pool with different chunk lengths per call and a
// padding row (slot -1) between them: pooled rows and the whole state pool match the CPU.
TEST(CudaParity, CompressorMatchesCpuAcrossBatchedChunkedCalls) {
  DEEPINFER_REQUIRE_GPU();
  struct Flavour {
    int ratio;
    bool overlap;
    std::int64_t d;
  };
  for (const Flavour fl : {Flavour{4, true, 64}, Flavour{128, false, 32}, Flavour{4, true, 512}, Flavour{2, false, 64}}) {
    SCOPED_TRACE(testing::Message() << "ratio " << fl.ratio << " overlap " << fl.overlap << " d " << fl.d);
    const std::int64_t coff = fl.overlap ? 2 : 1, width = coff * fl.d, slots = 3;
    const Tensor ape = random_tensor({fl.ratio, width}, 51);
    const Tensor gpu_ape = to_gpu(ape);
    CompressorState cpu_state{Tensor::zeros({slots * coff * fl.ratio, width}, DType::kF32),
                              Tensor::empty({slots * coff * fl.ratio, width}, DType::kF32), fl.ratio, fl.overlap};
    for (std::int64_t i = 0; i < cpu_state.score.numel(); ++i)
      cpu_state.score.data<float>()[i] = -std::numeric_limits<float>::infinity();
    CompressorState gpu_state{to_gpu(cpu_state.kv), to_gpu(cpu_state.score), fl.ratio, fl.overlap};
    const std::int32_t slot_of[3] = {2, 0, 1};
    std::int64_t pos[3] = {0, 0, 0};
    const std::int64_t chunks[6][3] = {{7, 1, 300}, {1, 1, 1}, {1, 130, 3}, {130, 1, 1}, {3, 9, 1}, {300, 1, 260}};
    for (int call = 0; call < 6; ++call) {
      std::vector<std::int32_t> positions, slot_ids;
      for (int s = 0; s < 3; ++s) {
        for (std::int64_t i = 0; i < chunks[call][s]; ++i) {
          positions.push_back(static_cast<std::int32_t>(pos[s] + i));
          slot_ids.push_back(slot_of[s]);
        }
        positions.push_back(0);
        slot_ids.push_back(-1);
        pos[s] += chunks[call][s];
      }
      const auto rows = static_cast<std::int64_t>(positions.size());
      const Tensor kv = random_tensor({rows, width}, static_cast<std::uint32_t>(52 + call));
      const Tensor score = random_tensor({rows, width}, static_cast<std::uint32_t>(60 + call));
      const Tensor p = i32_tensor({rows}, positions), sl = i32_tensor({rows}, slot_ids);
      Tensor want = Tensor::empty({rows, fl.d}, DType::kF32);
      backend().compressor_update(kv, score, ape, p, sl, cpu_state, want);
      Tensor got = poisoned({rows, fl.d}, DType::kF32);
      gpu().compressor_update(to_gpu(kv), to_gpu(score), gpu_ape, to_gpu(p), to_gpu(sl), gpu_state, got);
      expect_parity(got, want, 1e-5);
      expect_parity(gpu_state.kv, cpu_state.kv, 0.0);
      expect_parity_masked(gpu_state.score, cpu_state.score, 0.0);
    }
  }
}

// Rows at random positions (some seeing nothing), ties from rounded scores, block counts below and
// above the kept count: the same mask bit for bit.
TEST(CudaParity, CandidateMaskMatchesCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t n : {1, 37, 700, 5000})
    for (int block : {1, 4, 8})
      for (int top : {1, 4, 2048}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " block " << block << " top " << top);
        const std::int64_t t = 7;
        Tensor scores = random_tensor({t, n}, 71, 3.0f);
        for (std::int64_t i = 0; i < scores.numel(); ++i)
          scores.data<float>()[i] = std::round(scores.data<float>()[i] * 2.0f) / 2.0f;
        const Tensor pos = random_i32({t}, 72, -1, static_cast<std::int32_t>(2 * n + 4));
        Tensor want = Tensor::empty({t, n}, DType::kF32);
        backend().candidate_mask(scores, pos, 2, block, top, want);
        Tensor got = poisoned({t, n}, DType::kF32);
        gpu().candidate_mask(to_gpu(scores), to_gpu(pos), 2, block, top, got);
        expect_parity_masked(got, want, 0.0);
      }
}

}  // namespace
}  // namespace deepinfer::ops::test
