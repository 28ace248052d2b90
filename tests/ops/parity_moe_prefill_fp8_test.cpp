// CUDA parity of the fp8 prefill expert GEMM (moe_prefill_fp8_wgmma.cu): fp4 experts with many rows per
// expert on e4m3 wgmma against the CPU op and the skinny fp8 path (the same codes and scales), in each of
// its three scale forms, deterministic, batch-independent, in either operand order (K-permuted or not),
// and never taken where it does not fit or in batch-invariant mode.
#include <cstdio>
#include <cstring>

#include "ops/moe_prefill_util.h"

namespace deepinfer::ops::test {
namespace {

// How a test weight's ue8m0 scales spread along K (the kernel picks its scale form per 128-row tile).
enum class Spread {
  kNone,   // as quantised: every row within 14 octaves (one reference exponent per row)
  kStage,  // 128-K stages 16 octaves apart, flat inside a stage (a reference per row and stage)
  kBlock,  // 32-K blocks 16 octaves apart inside a stage (a fresh partial per block)
};

// An fp4 weight whose values are scaled by 2^-16 on the blocks the spread picks (codes kept, scale
// exponents lowered: the CPU and the GPU see the same weight).
LinearWeight spread_fp4(std::int64_t n, std::int64_t k, std::uint32_t seed, Spread spread) {
  LinearWeight w = quantize_fp4(random_tensor({n, k}, seed, 0.05f));
  if (spread == Spread::kNone) return w;
  auto* scale = w.scale.data<std::uint8_t>();
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < k / 32; ++b) {
      const bool low = spread == Spread::kStage ? (b / 4) % 2 == 1 : b % 2 == 1;
      if (low) scale[r * (k / 32) + b] = static_cast<std::uint8_t>(scale[r * (k / 32) + b] - 16);
    }
  return w;
}

// Expert e's weights spread by spreads[e % spreads.size()].
PrefillExperts fp8_experts(int n_exp, std::int64_t dim, std::int64_t inter, std::uint32_t seed,
                           const std::vector<Spread>& spreads) {
  PrefillExperts out;
  for (int e = 0; e < n_exp; ++e) {
    const auto s = seed + static_cast<std::uint32_t>(7 * e);
    const Spread sp = spreads[static_cast<std::size_t>(e) % spreads.size()];
    out.add({spread_fp4(inter, dim, s, sp), spread_fp4(inter, dim, s + 1, sp), spread_fp4(dim, inter, s + 2, sp)});
  }
  return out;
}

// min_rows 0: the skinny fp8 path at every size; fp8: the fp8 prefill GEMM from min_rows rows per expert
// (its operand order: CudaBackendOptions::moe_prefill_fp8_permuted).
std::unique_ptr<Backend> fp8_backend(int min_rows, bool fp8, bool invariant = false,
                                     bool permuted = CudaBackendOptions{}.moe_prefill_fp8_permuted) {
  CudaBackendOptions o;
  o.moe_prefill_min_rows = min_rows;
  o.moe_prefill_fp8 = fp8;
  o.batch_invariant = invariant;
  o.moe_prefill_fp8_permuted = permuted;
  return make_cuda_backend(o);
}

// moe_experts on `b`, back on the host.
Tensor run_fp8_experts(Backend& b, const PrefillStep& in, const PrefillExperts& ex, const MoeOptions& options) {
  return to_host(run_prefill_experts(b, in, ex, options), b);
}

bool fp8_same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.nbytes())) == 0;
}

// T = 1 and 7 put items far smaller than the 128-row tile through the kernel; 300 / 1000 give experts of
// several items with a partial last one. Experts cycle through the three scale forms. The skinny fp8 path
// multiplies the same codes (exact products; the tensor cores' fp8 accumulation and the SwiGLU's
// requantised codes differ): the two measured 2.4e-3 .. 3.2e-3 apart on the H200 (2026-11-30; the decode
// wgmma path alone sits 1e-3 .. 2e-3 from the CPU in its tests), so half the CPU bound.
TEST(CudaParity, MoePrefillFp8GemmMatchesCpuAndTheSkinnyPathInEveryScaleForm) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 6, k = 4;
  const std::int64_t dim = 1024, inter = 512;
  const PrefillExperts ex = fp8_experts(n_exp, dim, inter, 300, {Spread::kNone, Spread::kStage, Spread::kBlock});
  auto fp8 = fp8_backend(1, true);
  auto skinny = fp8_backend(0, false);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (std::int64_t t : {1, 7, 300, 1000}) {
    SCOPED_TRACE(testing::Message() << "T=" << t);
    const PrefillStep in = prefill_step(t, dim, k, n_exp, 2, 301);
    const Tensor want = cpu_prefill_experts(in, ex, options);
    const Tensor got = run_fp8_experts(*fp8, in, ex, options);
    EXPECT_LE(rel_error(got, want), kTolBf16);
    EXPECT_LE(rel_error(got, run_fp8_experts(*skinny, in, ex, options)), kTolBf16 / 2) << "vs the skinny fp8 path";
    EXPECT_TRUE(fp8_same_bits(got, run_fp8_experts(*fp8, in, ex, options))) << "repeat";
  }
}

// A row's output does not depend on the other tokens of the step: the last token alone gives the bits it
// had inside a 600-token prefill, in every scale form and either operand order.
TEST(CudaParity, MoePrefillFp8GemmGivesATokenTheSameBitsAloneAndInABatch) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 6, k = 6;
  const std::int64_t dim = 512, inter = 1024;
  const PrefillExperts ex = fp8_experts(n_exp, dim, inter, 700, {Spread::kNone, Spread::kStage, Spread::kBlock});
  const PrefillStep in = prefill_step(600, dim, k, n_exp, 3, 701);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (const bool permuted : {true, false}) {
    SCOPED_TRACE(testing::Message() << "K-permuted " << permuted);
    auto b = fp8_backend(1, true, false, permuted);
    const std::vector<float> all = values(run_fp8_experts(*b, in, ex, options));
    expect_bits_equal(values(run_fp8_experts(*b, in.narrow_last(), ex, options)), {all.end() - dim, all.end()});
  }
}

// Both operand orders in every scale form, for items of both token halves (T = 300: experts of ~200 rows,
// a full item and a partial one; 1000: several items). K-permuted and unpermuted operands multiply the
// same products into the same 32-K partials, summed in another order inside the tensor core: both within
// the CPU bound, each repeating its bits, and of each other as close as the skinny path is (printed:
// whether the bits agree; on the H200 they did at both sizes, 2026-11-30).
TEST(CudaParity, MoePrefillFp8GemmOperandOrdersAgree) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 6, k = 4;
  const std::int64_t dim = 1024, inter = 512;
  const PrefillExperts ex = fp8_experts(n_exp, dim, inter, 500, {Spread::kNone, Spread::kStage, Spread::kBlock});
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (std::int64_t t : {300, 1000}) {
    const PrefillStep in = prefill_step(t, dim, k, n_exp, 2, 501);
    const Tensor want = cpu_prefill_experts(in, ex, options);
    Tensor by_order[2];
    for (const bool permuted : {true, false}) {
      SCOPED_TRACE(testing::Message() << "T=" << t << ", K-permuted " << permuted);
      auto b = fp8_backend(1, true, false, permuted);
      const Tensor got = run_fp8_experts(*b, in, ex, options);
      EXPECT_TRUE(fp8_same_bits(got, run_fp8_experts(*b, in, ex, options)));
      EXPECT_LE(rel_error(got, want), kTolBf16);
      by_order[permuted ? 0 : 1] = got;
    }
    SCOPED_TRACE(testing::Message() << "T=" << t);
    const double apart = rel_error(by_order[0], by_order[1]);
    EXPECT_LE(apart, kTolBf16 / 2) << "K-permuted vs unpermuted";
    std::printf("moe_prefill_fp8 T=%lld: K-permuted %.3e / unpermuted %.3e vs CPU, %.3e apart, bits %s\n",
                static_cast<long long>(t), rel_error(by_order[0], want), rel_error(by_order[1], want), apart,
                fp8_same_bits(by_order[0], by_order[1]) ? "equal" : "differ");
  }
}

// Shapes the kernel does not take (w1 / w3 N = 320 is not a multiple of 128) and act blocks other than
// 128 still match the CPU through the other paths; batch-invariant mode ignores the switch (the same bits
// as with it off).
TEST(CudaParity, MoePrefillFp8GemmLeavesWhatItDoesNotFitToTheOtherPaths) {
  DEEPINFER_REQUIRE_GPU();
  auto fp8 = fp8_backend(1, true);
  {
    const PrefillExperts ex = fp8_experts(4, 1024, 320, 900, {Spread::kNone});
    const PrefillStep in = prefill_step(200, 1024, 2, 4, 1, 901);
    const MoeOptions options{10.0f, 128, DType::kBF16};
    EXPECT_LE(rel_error(run_fp8_experts(*fp8, in, ex, options), cpu_prefill_experts(in, ex, options)), kTolBf16);
  }
  const PrefillExperts ex = fp8_experts(4, 512, 512, 910, {Spread::kNone});
  const PrefillStep in = prefill_step(300, 512, 2, 4, 1, 911);
  for (int act : {32, 0}) {
    SCOPED_TRACE(testing::Message() << "act block " << act);
    const MoeOptions options{10.0f, act, DType::kBF16};
    EXPECT_LE(rel_error(run_fp8_experts(*fp8, in, ex, options), cpu_prefill_experts(in, ex, options)), kTolBf16);
  }
  const MoeOptions options{10.0f, 128, DType::kBF16};
  auto inv_on = fp8_backend(1, true, true), inv_off = fp8_backend(1, false, true);
  EXPECT_TRUE(fp8_same_bits(run_fp8_experts(*inv_on, in, ex, options), run_fp8_experts(*inv_off, in, ex, options)));
}

}  // namespace
}  // namespace deepinfer::ops::test
