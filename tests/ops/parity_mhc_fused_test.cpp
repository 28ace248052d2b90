// CUDA hc_post folded into the next mHC site's partial kernel (hc_post_fused_max_rows,
// Backend::hc_post_pre_norm): the bits of the two plain ops (a backend with the fold off) at batches of 1,
// 3, 8 and 33 rows, eager and replayed from a graph, within the CPU's bounds.
#include <memory>
#include <utility>
#include <vector>

#include "ops/graph.h"
#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

std::unique_ptr<Backend> fused_backend(bool on) {
  CudaBackendOptions options;
  options.hc_post_fused_max_rows = on ? 63 : 0;
  return make_cuda_backend(options);
}

// One site's random weights, on the host and on the device.
struct FusedSite {
  HcWeights host, device;
  Tensor norm, gnorm;
};

FusedSite fused_site(int n, std::int64_t d, std::uint32_t seed) {
  const std::int64_t mixes = (2 + n) * n;
  FusedSite s;
  s.host = HcWeights{random_tensor({mixes, n * d}, seed, 0.02f), random_tensor({mixes}, seed + 1, 0.5f),
                     random_tensor({3}, seed + 2, 0.5f)};
  s.device = HcWeights{to_gpu(s.host.fn), to_gpu(s.host.base), to_gpu(s.host.scale)};
  s.norm = random_tensor({d}, seed + 3, 1.0f, DType::kBF16);
  s.gnorm = to_gpu(s.norm);
  return s;
}

// Device outputs of hc_post_pre_norm (post / comb written over their inputs, as the V4 model does) and
// of the hc_post after it.
struct FusedOutputs {
  Tensor out, y, post, comb, next;
};

FusedOutputs fused_run(Backend& b, const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                       const FusedSite& site, const Tensor& f2) {
  const std::int64_t t = residual.dim(0), n = residual.dim(1), d = residual.dim(2);
  const DType act = residual.dtype();
  FusedOutputs o{poisoned({t, n, d}, act, b), poisoned({t, d}, act, b), to_gpu(post, b), to_gpu(comb, b),
                 poisoned({t, n, d}, act, b)};
  b.hc_post_pre_norm(to_gpu(f, b), to_gpu(residual, b), o.post, o.comb, o.out, site.device, HcOptions{}, site.gnorm,
                     1e-6f, o.y, o.post, o.comb);
  b.hc_post(to_gpu(f2, b), o.out, o.post, o.comb, o.next);  // the next sub-layer's exit reads the site's comb
  b.synchronize();
  return o;
}

void fused_expect_same_bits(const Tensor& got, Backend& gb, const Tensor& want, Backend& wb) {
  expect_bits_equal(values(to_host(got, gb)), values(to_host(want, wb)));
}

TEST(CudaParity, HcPostPreNormFoldedGivesTheTwoOpsBits) {
  DEEPINFER_REQUIRE_GPU();
  const std::unique_ptr<Backend> fast = fused_backend(true), plain = fused_backend(false);
  for (DType act : {DType::kBF16, DType::kF32})
    for (int n : {1, 4, 6})  // n = 6: not folded (the two ops)
      for (std::int64_t d : {std::int64_t{4096}, std::int64_t{100}})  // 32 slices; one slice, threads past the row
        for (std::int64_t t : {1, 3, 8, 33}) {
          SCOPED_TRACE(testing::Message() << dtype_name(act) << " n=" << n << " D=" << d << " T=" << t);
          const Tensor residual = random_tensor({t, n, d}, 111, 1.0f, act);
          const Tensor f = random_tensor({t, d}, 112, 1.0f, act), f2 = random_tensor({t, d}, 113, 1.0f, act);
          const Tensor post = random_tensor({t, n}, 114, 1.0f), comb = random_tensor({t, n, n}, 115, 0.5f);
          const FusedSite site = fused_site(n, d, 116);
          const FusedOutputs got = fused_run(*fast, f, residual, post, comb, site, f2);
          const FusedOutputs want = fused_run(*plain, f, residual, post, comb, site, f2);
          fused_expect_same_bits(got.out, *fast, want.out, *plain);
          fused_expect_same_bits(got.y, *fast, want.y, *plain);
          fused_expect_same_bits(got.post, *fast, want.post, *plain);
          fused_expect_same_bits(got.comb, *fast, want.comb, *plain);
          fused_expect_same_bits(got.next, *fast, want.next, *plain);
          if (t != 33 || d != 4096) continue;
          // The CPU reference (the base class: hc_post, then hc_pre_norm).
          Tensor out = Tensor::empty({t, n, d}, act), y = Tensor::empty({t, d}, act);
          Tensor cpost = post.clone(), ccomb = comb.clone();
          backend().hc_post_pre_norm(f, residual, cpost, ccomb, out, site.host, HcOptions{}, site.norm, 1e-6f, y, cpost,
                                     ccomb);
          const double tol = act == DType::kF32 ? 1e-4 : kTolBf16;
          expect_parity(got.out, out, tol, *fast);
          expect_parity(got.y, y, tol, *fast);
          expect_parity(got.post, cpost, 1e-4, *fast);
          expect_parity(got.comb, ccomb, 1e-4, *fast);
        }
}

// The V4 block's mHC chain captured in a graph (a site, a folded post + site, a post, a site): replays over
// new inputs give the plain eager ops' bits.
TEST(CudaParity, HcFoldedChainReplaysFromAGraphWithThePlainOpsBits) {
  DEEPINFER_REQUIRE_GPU();
  const std::unique_ptr<Backend> fast = fused_backend(true), plain = fused_backend(false);
  constexpr int kN = 4;
  constexpr std::int64_t kT = 3, kD = 4096;
  const FusedSite a = fused_site(kN, kD, 131), b2 = fused_site(kN, kD, 135);
  struct Chain {
    Tensor x0, f, x1, x2, y, post, comb, y_alone, post_alone, comb_alone;
  };
  auto chain = [&](Backend& b) {
    return Chain{b.empty({kT, kN, kD}, DType::kBF16), b.empty({kT, kD}, DType::kBF16),
                 b.empty({kT, kN, kD}, DType::kBF16), b.empty({kT, kN, kD}, DType::kBF16),
                 b.empty({kT, kD}, DType::kBF16),     b.empty({kT, kN}, DType::kF32),
                 b.empty({kT, kN, kN}, DType::kF32),  b.empty({kT, kD}, DType::kBF16),
                 b.empty({kT, kN}, DType::kF32),      b.empty({kT, kN, kN}, DType::kF32)};
  };
  Chain cf = chain(*fast), cp = chain(*plain);
  auto run = [&](Backend& b, Chain& c) {
    const HcOptions o;
    b.hc_pre_norm(c.x0, a.device, o, a.gnorm, 1e-6f, c.y, c.post, c.comb);
    b.hc_post_pre_norm(c.f, c.x0, c.post, c.comb, c.x1, b2.device, o, b2.gnorm, 1e-6f, c.y, c.post, c.comb);
    b.hc_post(c.f, c.x1, c.post, c.comb, c.x2);
    b.hc_pre_norm(c.x2, a.device, o, a.gnorm, 1e-6f, c.y_alone, c.post_alone, c.comb_alone);
  };
  auto load = [&](Backend& b, Chain& c, std::uint32_t seed) {
    b.copy(random_tensor({kT, kN, kD}, seed, 1.0f, DType::kBF16), c.x0);
    b.copy(random_tensor({kT, kD}, seed + 1, 1.0f, DType::kBF16), c.f);
    b.synchronize();
  };
  load(*fast, cf, 140);
  run(*fast, cf);  // eager first: scratch sized outside the capture
  fast->synchronize();
  Graph graph = capture_graph(*fast, [&] { run(*fast, cf); });
  for (std::uint32_t seed : {141u, 143u}) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    load(*fast, cf, seed);
    graph.replay();
    fast->synchronize();
    load(*plain, cp, seed);
    run(*plain, cp);
    plain->synchronize();
    for (auto [g, w] : {std::pair{&cf.x1, &cp.x1}, std::pair{&cf.x2, &cp.x2}, std::pair{&cf.y, &cp.y},
                        std::pair{&cf.post, &cp.post}, std::pair{&cf.comb, &cp.comb},
                        std::pair{&cf.y_alone, &cp.y_alone}, std::pair{&cf.comb_alone, &cp.comb_alone}})
      fused_expect_same_bits(*g, *fast, *w, *plain);
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
