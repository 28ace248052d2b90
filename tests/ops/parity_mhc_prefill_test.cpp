// CUDA parity of the prefill mHC mixing sums (mhc_prefill_kernels.cu, steps of >= 64 tokens): hc_pre and
// hc_head against the CPU, and every token's outputs bit-identical to the same token run alone (the
// per-token kernel), which keeps prefill and decode rows batch-invariant.
#include <vector>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

HcWeights prefill_hc_weights(int n, std::int64_t d, bool head, std::uint32_t seed) {
  const std::int64_t mixes = head ? n : (2 + n) * n;
  return HcWeights{to_gpu(random_tensor({mixes, n * d}, seed, 0.02f)), to_gpu(random_tensor({mixes}, seed + 1, 0.5f)),
                   to_gpu(random_tensor({head ? 1 : 3}, seed + 2, 0.5f))};
}

HcWeights prefill_hc_host(const HcWeights& w) { return {to_host(w.fn), to_host(w.base), to_host(w.scale)}; }

// Rows [row, row + 1) of a device result, as host floats.
std::vector<float> host_row(const Tensor& device, std::int64_t row) {
  const std::vector<float> all = values(to_host(device));
  const std::int64_t w = device.numel() / device.dim(0);
  return {all.begin() + row * w, all.begin() + (row + 1) * w};
}

TEST(CudaParity, HcMixPrefillSumsMatchCpuAndEachTokenAlone) {
  DEEPINFER_REQUIRE_GPU();
  const HcOptions options;
  struct Shape3 {
    int n;
    std::int64_t d, t;
  };
  // width 16384 = 32 slices (V4-Flash); 400 = one partial slice; head n = 1; 64 = the threshold;
  // 301 leaves a partial 64-token tile.
  for (const Shape3& s : std::vector<Shape3>{{4, 4096, 301}, {4, 100, 64}, {1, 64, 130}}) {
    SCOPED_TRACE(testing::Message() << "n=" << s.n << " D=" << s.d << " T=" << s.t);
    const Tensor x = random_tensor({s.t, s.n, s.d}, 81, 1.0f, DType::kBF16);
    const Tensor gx = to_gpu(x);
    const HcWeights w = prefill_hc_weights(s.n, s.d, false, 82), hw = prefill_hc_weights(s.n, s.d, true, 85);
    Tensor y = Tensor::empty({s.t, s.d}, DType::kBF16), post = Tensor::empty({s.t, s.n}, DType::kF32),
           comb = Tensor::empty({s.t, s.n, s.n}, DType::kF32), hy = Tensor::empty({s.t, s.d}, DType::kBF16);
    backend().hc_pre(x, prefill_hc_host(w), options, y, post, comb);
    backend().hc_head(x, prefill_hc_host(hw), options, hy);
    Tensor gy = poisoned({s.t, s.d}, DType::kBF16), gpost = poisoned({s.t, s.n}, DType::kF32),
           gcomb = poisoned({s.t, s.n, s.n}, DType::kF32), ghy = poisoned({s.t, s.d}, DType::kBF16);
    gpu().hc_pre(gx, w, options, gy, gpost, gcomb);
    gpu().hc_head(gx, hw, options, ghy);
    expect_parity(gy, y, kTolBf16);
    expect_parity(gpost, post, 1e-4);
    expect_parity(gcomb, comb, 1e-4);
    expect_parity(ghy, hy, kTolBf16);
    for (std::int64_t r : {std::int64_t{0}, s.t - 1}) {
      SCOPED_TRACE(testing::Message() << "token " << r << " alone");
      const Tensor x1 = to_gpu(x.narrow(0, r, 1));
      Tensor y1 = poisoned({1, s.d}, DType::kBF16), post1 = poisoned({1, s.n}, DType::kF32),
             comb1 = poisoned({1, s.n, s.n}, DType::kF32), hy1 = poisoned({1, s.d}, DType::kBF16);
      gpu().hc_pre(x1, w, options, y1, post1, comb1);
      gpu().hc_head(x1, hw, options, hy1);
      expect_bits_equal(values(to_host(y1)), host_row(gy, r));
      expect_bits_equal(values(to_host(post1)), host_row(gpost, r));
      expect_bits_equal(values(to_host(comb1)), host_row(gcomb, r));
      expect_bits_equal(values(to_host(hy1)), host_row(ghy, r));
    }
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
