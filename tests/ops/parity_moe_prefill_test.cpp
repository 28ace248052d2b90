// CUDA parity of the prefill grouped expert GEMM (moe_prefill_kernels.cu): fp4 experts with many rows
// per expert against the CPU op, bit for bit against the mma.sync pipeline it replaces in prefill
// (same K order, same exact bf16 operands), deterministic, and never taken where it does not fit.
#include <cstring>

#include "ops/moe_prefill_util.h"

namespace deepinfer::ops::test {
namespace {

std::unique_ptr<Backend> prefill_backend(int min_rows, bool invariant, bool wgmma) {
  CudaBackendOptions o;
  o.moe_prefill_min_rows = min_rows;
  o.batch_invariant = invariant;
  o.moe_prefill_wgmma = wgmma;
  o.moe_prefill_fp8 = false;  // the bf16 GEMMs (parity_moe_prefill_fp8_test.cpp tests the fp8 one)
  return make_cuda_backend(o);
}

// T = 1 and 7 force the kernel onto items far smaller than its 128-row tile; T = 300 / 1000 give
// experts of several items with a partial last one (K = 1024 for w1/w3, 512 for w2). The mma.sync
// kernel and the batch-invariant mode with and without it give the same bits; the wgmma kernel
// matches the CPU and repeats its bits.
TEST(CudaParity, MoePrefillGemmMatchesCpuAndTheMmaPipelineBitForBit) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 8, k = 4;
  const std::int64_t dim = 1024, inter = 512;
  const PrefillExperts ex = prefill_fp4_experts(n_exp, dim, inter, 500);
  auto forced = prefill_backend(1, false, false);  // the mma.sync prefill GEMM at every size
  auto mma = prefill_backend(0, true, false);      // the batch-invariant mma.sync pipeline, prefill GEMM off
  auto invariant = prefill_backend(1, true, true); // batch-invariant mode: the mma.sync prefill GEMM
  auto wgmma = prefill_backend(1, false, true);    // the wgmma kernel: its own summation order
  for (std::int64_t t : {1, 7, 300, 1000})
    for (int act : {128, 0}) {
      SCOPED_TRACE(testing::Message() << "T=" << t << " act block " << act);
      const PrefillStep in = prefill_step(t, dim, k, n_exp, 2, 501);
      const MoeOptions options{10.0f, act, DType::kBF16};
      const Tensor want = cpu_prefill_experts(in, ex, options);
      std::vector<Tensor> results;
      for (Backend* b : {forced.get(), mma.get(), invariant.get(), forced.get()}) {
        const Tensor got = run_prefill_experts(*b, in, ex, options);
        expect_parity(got, want, kTolBf16, *b);
        results.push_back(to_host(got, *b));
      }
      for (std::size_t i = 1; i < results.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "result " << i << " vs the prefill GEMM's first");
        EXPECT_EQ(std::memcmp(results[0].raw_data(), results[i].raw_data(), static_cast<std::size_t>(results[0].nbytes())),
                  0);
      }
      const Tensor g1 = run_prefill_experts(*wgmma, in, ex, options);
      expect_parity(g1, want, kTolBf16, *wgmma);
      const Tensor w1 = to_host(g1, *wgmma), w2 = to_host(run_prefill_experts(*wgmma, in, ex, options), *wgmma);
      EXPECT_EQ(std::memcmp(w1.raw_data(), w2.raw_data(), static_cast<std::size_t>(w1.nbytes())), 0) << "wgmma repeat";
    }
}

// A row's output does not depend on the other tokens of the step: the last token alone gives the
// bits it had inside a 600-token prefill (the prefill GEMM at every size: mma.sync in batch-invariant
// mode, and wgmma).
TEST(CudaParity, MoePrefillGemmGivesATokenTheSameBitsAloneAndInABatch) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 8, k = 6;
  const std::int64_t dim = 512, inter = 1024;
  const PrefillExperts ex = prefill_fp4_experts(n_exp, dim, inter, 700);
  const PrefillStep in = prefill_step(600, dim, k, n_exp, 3, 701);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (const bool invariant : {true, false}) {
    SCOPED_TRACE(invariant ? "batch-invariant (mma.sync)" : "wgmma");
    auto b = prefill_backend(1, invariant, true);
    const std::vector<float> all = values(to_host(run_prefill_experts(*b, in, ex, options), *b));
    expect_bits_equal(values(to_host(run_prefill_experts(*b, in.narrow_last(), ex, options), *b)),
                      {all.end() - dim, all.end()});
  }
}

// Shapes the kernel does not take (w2's K = 384 is not a multiple of 512) still match the CPU through
// the other paths with the prefill GEMM switched on.
TEST(CudaParity, MoePrefillGemmLeavesShapesItDoesNotFitToTheOtherPaths) {
  DEEPINFER_REQUIRE_GPU();
  const PrefillExperts ex = prefill_fp4_experts(4, 1024, 384, 900);
  auto b = prefill_backend(1, false, true);
  const PrefillStep in = prefill_step(200, 1024, 2, 4, 1, 901);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  expect_parity(run_prefill_experts(*b, in, ex, options), cpu_prefill_experts(in, ex, options), kTolBf16, *b);
}

}  // namespace
}  // namespace deepinfer::ops::test
