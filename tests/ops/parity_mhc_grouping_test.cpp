// CUDA mHC decode mixing with a partial-sum block serving a group of tokens (hc_mix_partial_kernel:
// the fn slice read once per group; group size follows T): every token's outputs are bit-identical
// to the same token run alone at batches of 3, 8, 20 and 33 rows (groups of 1, 2, 5 and 8 tokens,
// the last one partial), for hc_pre_norm, hc_mix (Sinkhorn warp, no collapse) and hc_head, and the
// 33-row batch stays within the CPU's bounds.
#include <cstddef>
#include <utility>
#include <vector>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

// A site's random weights on the host and their device copy.
struct GroupingWeights {
  HcWeights host, device;
};

GroupingWeights grouping_weights(int n, std::int64_t d, bool head, std::uint32_t seed) {
  const std::int64_t mixes = head ? n : (2 + n) * n;
  HcWeights host{random_tensor({mixes, n * d}, seed, 0.02f), random_tensor({mixes}, seed + 1, 0.5f),
                 random_tensor({head ? 1 : 3}, seed + 2, 0.5f)};
  HcWeights device{to_gpu(host.fn), to_gpu(host.base), to_gpu(host.scale)};
  return {std::move(host), std::move(device)};
}

// The outputs of the three mixing ops for rows of x (device tensors).
struct GroupingOutputs {
  Tensor y, post, comb;      // hc_pre_norm
  Tensor pre, mpost, mcomb;  // hc_mix
  Tensor hy;                 // hc_head
};

GroupingOutputs grouping_run(const Tensor& gx, const HcWeights& w, const HcWeights& hw, const Tensor& gnw) {
  const HcOptions options;
  const std::int64_t t = gx.dim(0), n = gx.dim(1), d = gx.dim(2);
  GroupingOutputs o{poisoned({t, d}, DType::kBF16), poisoned({t, n}, DType::kF32), poisoned({t, n, n}, DType::kF32),
                    poisoned({t, n}, DType::kF32),  poisoned({t, n}, DType::kF32), poisoned({t, n, n}, DType::kF32),
                    poisoned({t, d}, DType::kBF16)};
  gpu().hc_pre_norm(gx, w, options, gnw, 1e-6f, o.y, o.post, o.comb);
  gpu().hc_mix(gx, w, options, o.pre, o.mpost, o.mcomb);
  gpu().hc_head(gx, hw, options, o.hy);
  return o;
}

// Row r of a batch's device result bit-identical to the one-row result of the same token.
void expect_row_matches_alone(const Tensor& batch, std::int64_t r, const Tensor& alone) {
  const std::vector<float> all = values(to_host(batch)), one = values(to_host(alone));
  const auto width = static_cast<std::ptrdiff_t>(one.size());
  expect_bits_equal({all.begin() + r * width, all.begin() + (r + 1) * width}, one);
}

TEST(CudaParity, HcMixGroupedPartialsGiveEachTokenItsAloneBits) {
  DEEPINFER_REQUIRE_GPU();
  // V4-Flash (width 16384 = 32 slices) and one partial slice (width 400: threads past the row).
  for (const std::int64_t d : {std::int64_t{4096}, std::int64_t{100}}) {
    const int n = 4;
    const std::int64_t rows = 33;
    SCOPED_TRACE(testing::Message() << "n=" << n << " D=" << d);
    const Tensor x = random_tensor({rows, n, d}, 91, 1.0f, DType::kBF16);
    const GroupingWeights site = grouping_weights(n, d, false, 92), head = grouping_weights(n, d, true, 95);
    const HcWeights &w = site.host, &hw = head.host, &gw = site.device, &ghw = head.device;
    const Tensor nw = random_tensor({d}, 98, 1.0f, DType::kBF16);
    const Tensor gnw = to_gpu(nw);
    std::vector<GroupingOutputs> alone;
    for (std::int64_t r = 0; r < rows; ++r) alone.push_back(grouping_run(to_gpu(x.narrow(0, r, 1)), gw, ghw, gnw));
    for (const std::int64_t t : {std::int64_t{3}, std::int64_t{8}, std::int64_t{20}, rows}) {
      const GroupingOutputs batch = grouping_run(to_gpu(x.narrow(0, 0, t)), gw, ghw, gnw);
      for (std::int64_t r = 0; r < t; ++r) {
        SCOPED_TRACE(testing::Message() << "batch " << t << " row " << r);
        const GroupingOutputs& a = alone[static_cast<std::size_t>(r)];
        expect_row_matches_alone(batch.y, r, a.y);
        expect_row_matches_alone(batch.post, r, a.post);
        expect_row_matches_alone(batch.comb, r, a.comb);
        expect_row_matches_alone(batch.pre, r, a.pre);
        expect_row_matches_alone(batch.mpost, r, a.mpost);
        expect_row_matches_alone(batch.mcomb, r, a.mcomb);
        expect_row_matches_alone(batch.hy, r, a.hy);
      }
      if (t != rows) continue;
      // The grouped batch against the CPU ops (hc_mix's comb is hc_pre_norm's: same mixes).
      const HcOptions options;
      Tensor y = Tensor::empty({t, d}, DType::kBF16), post = Tensor::empty({t, n}, DType::kF32),
             comb = Tensor::empty({t, n, n}, DType::kF32), hy = Tensor::empty({t, d}, DType::kBF16);
      backend().hc_pre_norm(x, w, options, nw, 1e-6f, y, post, comb);
      backend().hc_head(x, hw, options, hy);
      expect_parity(batch.y, y, kTolBf16);
      expect_parity(batch.post, post, 1e-4);
      expect_parity(batch.comb, comb, 1e-4);
      expect_parity(batch.mcomb, comb, 1e-4);
      expect_parity(batch.hy, hy, kTolBf16);
    }
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
