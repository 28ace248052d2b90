// CUDA vs CPU parity of the V4.1 ops: hc_mix (site coefficients with the pre weights stored),
// hc_collapse with given weights, and the Engram gate (strided key/value views of one kv row,
// a zero omega row for sign(0), out aliasing x). Each op's last token must also come out
// bit-identical when run alone (row-wise batch invariance).
#include <algorithm>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

HcWeights mix_weights(int n, std::int64_t d, std::uint32_t seed) {
  const std::int64_t mixes = (2 + n) * n;
  return HcWeights{random_tensor({mixes, n * d}, seed, 0.02f), random_tensor({mixes}, seed + 1, 0.5f),
                   random_tensor({3}, seed + 2, 0.5f)};
}

HcWeights mix_to_gpu(const HcWeights& w) { return {to_gpu(w.fn), to_gpu(w.base), to_gpu(w.scale)}; }

// The last `count` values of a device tensor, as floats.
std::vector<float> tail_values(const Tensor& device, std::int64_t count) {
  const std::vector<float> all = values(to_host(device));
  return {all.end() - count, all.end()};
}

TEST(CudaParity, HcMixMatchesCpuAndIsBatchInvariant) {
  DEEPINFER_REQUIRE_GPU();
  const HcOptions options;
  for (DType act : {DType::kF32, DType::kBF16})
    for (int n : {1, 4, 6})
      for (std::int64_t d : {97, 4096})
        for (std::int64_t t : {1, 37}) {
          SCOPED_TRACE(testing::Message() << dtype_name(act) << " n=" << n << " D=" << d << " T=" << t);
          const Tensor x = random_tensor({t, n, d}, 91, 1.0f, act);
          const HcWeights w = mix_weights(n, d, 92);
          Tensor pre = Tensor::empty({t, n}, DType::kF32), post = Tensor::empty({t, n}, DType::kF32),
                 comb = Tensor::empty({t, n, n}, DType::kF32);
          backend().hc_mix(x, w, options, pre, post, comb);
          const HcWeights gw = mix_to_gpu(w);
          Tensor gpre = poisoned({t, n}, DType::kF32), gpost = poisoned({t, n}, DType::kF32),
                 gcomb = poisoned({t, n, n}, DType::kF32);
          gpu().hc_mix(to_gpu(x), gw, options, gpre, gpost, gcomb);
          expect_parity(gpre, pre, 1e-4);
          expect_parity(gpost, post, 1e-4);
          expect_parity(gcomb, comb, 1e-4);

          Tensor one_pre = poisoned({1, n}, DType::kF32), one_post = poisoned({1, n}, DType::kF32),
                 one_comb = poisoned({1, n, n}, DType::kF32);
          gpu().hc_mix(to_gpu(x.narrow(0, t - 1, 1)), gw, options, one_pre, one_post, one_comb);
          expect_bits_equal(values(to_host(one_pre)), tail_values(gpre, n));
          expect_bits_equal(values(to_host(one_post)), tail_values(gpost, n));
          expect_bits_equal(values(to_host(one_comb)), tail_values(gcomb, n * n));
        }
}

TEST(CudaParity, HcCollapseMatchesCpuForF32AndBf16) {
  DEEPINFER_REQUIRE_GPU();
  for (DType act : {DType::kF32, DType::kBF16})
    for (int n : {1, 4, 6})
      for (std::int64_t d : {97, 4096})
        for (std::int64_t t : {1, 37}) {
          SCOPED_TRACE(testing::Message() << dtype_name(act) << " n=" << n << " D=" << d << " T=" << t);
          const Tensor x = random_tensor({t, n, d}, 93, 1.0f, act);
          const Tensor pre = random_tensor({t, n}, 94, 0.7f);  // any sign: the op takes the weights as given
          const Tensor gx = to_gpu(x), gpre = to_gpu(pre);
          Tensor y = Tensor::empty({t, d}, act);
          backend().hc_collapse(x, pre, y);
          Tensor gy = poisoned({t, d}, act);
          gpu().hc_collapse(gx, gpre, gy);
          expect_parity(gy, y, act == DType::kF32 ? 1e-4 : kTolBf16);

          Tensor one = poisoned({1, d}, act);
          gpu().hc_collapse(to_gpu(x.narrow(0, t - 1, 1)), to_gpu(pre.narrow(0, t - 1, 1)), one);
          expect_bits_equal(values(to_host(one)), tail_values(gy, d));
        }
}

TEST(CudaParity, EngramGateMatchesCpuOnStridedKeyValueAndInPlace) {
  DEEPINFER_REQUIRE_GPU();
  const float eps = 1e-6f;
  for (DType act : {DType::kF32, DType::kBF16})
    for (int n : {1, 4})
      for (std::int64_t d : {97, 4096})
        for (std::int64_t t : {1, 37}) {
          SCOPED_TRACE(testing::Message() << dtype_name(act) << " n=" << n << " D=" << d << " T=" << t);
          const Tensor x = random_tensor({t, n, d}, 95, 1.0f, act);
          // The model's layout: one [T, (n + 1)·D] projection row holds the n keys, then the value.
          const Tensor kv = random_tensor({t, (n + 1) * d}, 96, 1.0f, act);
          const Tensor key = kv.narrow(1, 0, n * d), value = kv.narrow(1, n * d, d);
          std::vector<float> om = values(random_tensor({n, d}, 97, 1.0f));
          if (n > 1) std::fill(om.begin() + d, om.begin() + 2 * d, 0.0f);  // copy 1: dot = 0, gate = σ(0)
          const Tensor omega = Tensor::from_f32({n, d}, om);
          Tensor out = Tensor::empty({t, n, d}, act);
          backend().engram_gate(x, key, value, omega, eps, out);

          const Tensor gkv = to_gpu(kv), gomega = to_gpu(omega);
          const Tensor gkey = gkv.narrow(1, 0, n * d), gvalue = gkv.narrow(1, n * d, d);
          const double tol = act == DType::kF32 ? 1e-4 : kTolBf16;
          Tensor gout = poisoned({t, n, d}, act);
          gpu().engram_gate(to_gpu(x), gkey, gvalue, gomega, eps, gout);
          expect_parity(gout, out, tol);
          Tensor gx = to_gpu(x);  // out aliasing x, as the model calls it
          gpu().engram_gate(gx, gkey, gvalue, gomega, eps, gx);
          expect_parity(gx, out, tol);

          const Tensor gkv1 = to_gpu(kv.narrow(0, t - 1, 1));
          Tensor one = poisoned({1, n, d}, act);
          gpu().engram_gate(to_gpu(x.narrow(0, t - 1, 1)), gkv1.narrow(1, 0, n * d), gkv1.narrow(1, n * d, d),
                            gomega, eps, one);
          expect_bits_equal(values(to_host(one)), tail_values(gout, n * d));
        }
}

}  // namespace
}  // namespace deepinfer::ops::test
