// CUDA vs CPU parity of the tensor-core sparse attention (bf16 q and KV rows, block 64): decode and
// prefill token counts, 1 to 2100 indices with -1 holes, whole -1 tiles and rows, three KV sources
// (two paged), sinks, bf16-rounded and f32 probabilities; plus batch invariance bit for bit.
#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

struct MmaAttnCase {
  std::int64_t tokens, heads, d, k;
  bool round_probs;
  DType out_dtype;
};

// KV of one test: a contiguous window, a compressed pool paged by 16 rows, and an extra pool
// paged by 64 rows, as host tensors and as device copies.
struct MmaAttnKv {
  static constexpr std::int64_t kWindow = 150, kComp = 200, kExtra = 130;
  Tensor window, comp_pool, comp_pages, extra_pool, extra_pages;
  std::vector<RowView> host, device;

  MmaAttnKv(std::int64_t d, Backend& b) {
    window = random_tensor({kWindow, d}, 61, 1.0f, DType::kBF16);
    comp_pool = random_tensor({16 * 16, d}, 62, 1.0f, DType::kBF16);
    comp_pages = i32_tensor({13}, {9, 2, 15, 0, 3, 11, 6, 14, 1, 8, 12, 5, 7});
    extra_pool = random_tensor({64 * 4, d}, 63, 1.0f, DType::kBF16);
    extra_pages = i32_tensor({3}, {2, 0, 3});
    host = {RowView::contiguous(window), RowView{comp_pool, comp_pages, 16, kComp},
            RowView{extra_pool, extra_pages, 64, kExtra}};
    for (const RowView& v : host) device.push_back(to_gpu(v, b));
  }
  static constexpr std::int64_t total() { return kWindow + kComp + kExtra; }
};

// Indices with ~15% holes, one whole -1 tile (token 0, positions 64..127) and one row without any
// index (token 1), so the skip rules and the zero output are exercised.
Tensor mma_attn_indices(std::int64_t tokens, std::int64_t k, std::uint32_t seed) {
  Tensor idx = random_i32({tokens, k}, seed, 0, static_cast<std::int32_t>(MmaAttnKv::total() - 1));
  std::mt19937 rng(seed + 1);
  auto* p = idx.data<std::int32_t>();
  for (std::int64_t i = 0; i < tokens * k; ++i)
    if (rng() % 100 < 15) p[i] = -1;
  for (std::int64_t j = 64; j < std::min<std::int64_t>(k, 128); ++j) p[j] = -1;
  if (tokens > 1)
    for (std::int64_t j = 0; j < k; ++j) p[k + j] = -1;
  return idx;
}

void check_mma_attention(const MmaAttnCase& c, Backend& b) {
  SCOPED_TRACE(testing::Message() << "T=" << c.tokens << " H=" << c.heads << " d=" << c.d << " K=" << c.k
                                  << " round " << c.round_probs << " out " << dtype_name(c.out_dtype));
  const MmaAttnKv kv(c.d, b);
  const Tensor q = random_tensor({c.tokens, c.heads, c.d}, 64, 2.0f, DType::kBF16);  // peaked softmax
  const Tensor idx = mma_attn_indices(c.tokens, c.k, 65);
  Tensor sinks = random_tensor({c.heads}, 66, 2.0f);
  sinks.data<float>()[0] = 8.0f;  // a sink that dominates its head
  const AttentionOptions options{1.0f / std::sqrt(static_cast<float>(c.d)), c.round_probs, 64};
  Tensor want = Tensor::empty(q.shape(), c.out_dtype);
  backend().sparse_attention(q, kv.host, idx, sinks, options, want);
  Tensor got = poisoned(q.shape(), c.out_dtype, b);
  b.sparse_attention(to_gpu(q, b), kv.device, to_gpu(idx, b), to_gpu(sinks, b), options, got);
  expect_parity(got, want, kTolBf16, b);
}

TEST(CudaParity, TensorCoreSparseAttentionMatchesCpu) {
  DEEPINFER_REQUIRE_GPU();
  const std::vector<MmaAttnCase> cases = {
      {1, 64, 512, 640, true, DType::kBF16},   {1, 64, 512, 640, false, DType::kBF16},
      {3, 64, 512, 777, true, DType::kF32},    {3, 64, 512, 63, false, DType::kBF16},
      {64, 64, 512, 192, true, DType::kBF16},  {64, 8, 128, 700, false, DType::kBF16},
      {300, 64, 512, 65, false, DType::kBF16}, {300, 64, 512, 129, true, DType::kF32},
      {3, 20, 256, 1, true, DType::kBF16},     {5, 128, 512, 130, true, DType::kBF16},
      {8, 64, 512, 640, false, DType::kF32},   {32, 64, 512, 640, true, DType::kBF16},
      // past 16 tiles: row addresses resolved again inside the loop (unsplit)
      {150, 64, 512, 1100, true, DType::kBF16}, {2, 16, 128, 2100, false, DType::kBF16}};
  for (const MmaAttnCase& c : cases) check_mma_attention(c, gpu());
  for (const MmaAttnCase& c : cases) check_mma_attention(c, gpu_invariant());
}

// Batch-invariant mode: a token's output bits do not depend on how many tokens share the call
// (the plan picks other head groupings for 1 and 300 tokens, and never splits the index list).
TEST(CudaParity, TensorCoreSparseAttentionIsBatchInvariant) {
  DEEPINFER_REQUIRE_GPU();
  Backend& b = gpu_invariant();
  const MmaAttnKv kv(512, b);
  const std::int64_t tokens = 300, heads = 64, d = 512, k = 640;
  const Tensor q = random_tensor({tokens, heads, d}, 71, 2.0f, DType::kBF16);
  const Tensor idx = mma_attn_indices(tokens, k, 72);
  const Tensor sinks = random_tensor({heads}, 73);
  for (const bool round_probs : {true, false}) {
    const AttentionOptions options{1.0f / std::sqrt(static_cast<float>(d)), round_probs, 64};
    Tensor all = b.empty({tokens, heads, d}, DType::kBF16);
    b.sparse_attention(to_gpu(q, b), kv.device, to_gpu(idx, b), to_gpu(sinks, b), options, all);
    const std::vector<float> all_host = values(to_host(all, b));
    for (const std::int64_t t : {0, 2, 151, 299}) {
      SCOPED_TRACE(testing::Message() << "token " << t << " round " << round_probs);
      Tensor one = b.empty({1, heads, d}, DType::kBF16);
      b.sparse_attention(to_gpu(q.narrow(0, t, 1).clone(), b), kv.device, to_gpu(idx.narrow(0, t, 1).clone(), b),
                         to_gpu(sinks, b), options, one);
      const std::vector<float> one_host = values(to_host(one, b));
      const auto begin = all_host.begin() + t * heads * d;
      expect_bits_equal(one_host, std::vector<float>(begin, begin + heads * d));
    }
  }
}

// Bad indices on the tensor-core path surface as deepinfer::Error at the next synchronisation.
TEST(CudaParity, TensorCoreSparseAttentionReportsIndexOutsideTheKvRows) {
  DEEPINFER_REQUIRE_GPU();
  Backend& b = gpu();
  const MmaAttnKv kv(128, b);
  const Tensor q = to_gpu(random_tensor({2, 16, 128}, 81, 1.0f, DType::kBF16), b);
  Tensor idx = mma_attn_indices(2, 70, 82);
  idx.data<std::int32_t>()[5] = static_cast<std::int32_t>(MmaAttnKv::total());
  const Tensor sinks = to_gpu(random_tensor({16}, 83), b);
  Tensor out = b.empty({2, 16, 128}, DType::kBF16);
  const AttentionOptions options{0.1f, true, 64};
  EXPECT_THROW(
      {
        b.sparse_attention(q, kv.device, to_gpu(idx, b), sinks, options, out);
        b.synchronize();
      },
      Error);
}

}  // namespace
}  // namespace deepinfer::ops::test
