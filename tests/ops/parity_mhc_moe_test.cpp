// CUDA vs CPU parity of mHC (pre with Sinkhorn, pre fused with RMSNorm, post, head) and MoE (routing by score function,
// bias and hash table; routed experts in fp4 / fp8 / bf16 through the grouped GEMM pipeline).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

HcWeights hc_weights(int n, std::int64_t d, bool head, std::uint32_t seed) {
  const std::int64_t mixes = head ? n : (2 + n) * n;
  return HcWeights{random_tensor({mixes, n * d}, seed, 0.02f), random_tensor({mixes}, seed + 1, 0.5f),
                   random_tensor({head ? 1 : 3}, seed + 2, 0.5f)};
}

HcWeights hc_to_gpu(const HcWeights& w) { return {to_gpu(w.fn), to_gpu(w.base), to_gpu(w.scale)}; }

TEST(CudaParity, HcPrePostHeadMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  const HcOptions options;
  for (int n : {1, 4, 6})
    for (std::int64_t d : {64, 4096})
      for (std::int64_t t : {1, 19}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " D=" << d << " T=" << t);
        const Tensor x = random_tensor({t, n, d}, 61, 1.0f, DType::kBF16);
        const HcWeights w = hc_weights(n, d, false, 62);
        Tensor y = Tensor::empty({t, d}, DType::kF32), post = Tensor::empty({t, n}, DType::kF32),
               comb = Tensor::empty({t, n, n}, DType::kF32);
        backend().hc_pre(x, w, options, y, post, comb);
        Tensor gy = poisoned({t, d}, DType::kF32), gpost = poisoned({t, n}, DType::kF32),
               gcomb = poisoned({t, n, n}, DType::kF32);
        const Tensor gx = to_gpu(x);
        gpu().hc_pre(gx, hc_to_gpu(w), options, gy, gpost, gcomb);
        expect_parity(gy, y, 1e-4);
        expect_parity(gpost, post, 1e-4);
        expect_parity(gcomb, comb, 1e-4);

        const Tensor f = random_tensor({t, d}, 63, 1.0f, DType::kBF16);
        Tensor out = Tensor::empty({t, n, d}, DType::kBF16);
        backend().hc_post(f, x, post, comb, out);
        Tensor gout = poisoned({t, n, d}, DType::kBF16);
        gpu().hc_post(to_gpu(f), gx, to_gpu(post), to_gpu(comb), gout);
        expect_parity(gout, out, kTolBf16);

        const HcWeights hw = hc_weights(n, d, true, 64);
        Tensor hy = Tensor::empty({t, d}, DType::kBF16);
        backend().hc_head(x, hw, options, hy);
        Tensor ghy = poisoned({t, d}, DType::kBF16);
        gpu().hc_head(gx, hc_to_gpu(hw), options, ghy);
        expect_parity(ghy, hy, kTolBf16);
      }
}

// The fused hc_pre + rms_norm: within bounds of the CPU composition, and bit-identical to the GPU's
// own hc_pre followed by rms_norm (the fused norm sums in rms_norm_kernel's order). D = 5000 and
// n = 6 take the kernel's loop past the registers; T = 1 vs 19 checks the last row alone.
TEST(CudaParity, HcPreNormMatchesCpuAndTheUnfusedGpuOps) {
  DEEPINFER_REQUIRE_GPU();
  const HcOptions options;
  for (DType act : {DType::kF32, DType::kBF16})
    for (int n : {1, 4, 6})
      for (std::int64_t d : {64, 4096, 5000})
        for (std::int64_t t : {1, 19}) {
          SCOPED_TRACE(testing::Message() << dtype_name(act) << " n=" << n << " D=" << d << " T=" << t);
          const Tensor x = random_tensor({t, n, d}, 71, 1.0f, act);
          const HcWeights w = hc_weights(n, d, false, 72);
          const Tensor nw = random_tensor({d}, 75, 1.0f, DType::kBF16);
          Tensor y = Tensor::empty({t, d}, act), post = Tensor::empty({t, n}, DType::kF32),
                 comb = Tensor::empty({t, n, n}, DType::kF32);
          backend().hc_pre_norm(x, w, options, nw, 1e-6f, y, post, comb);
          const Tensor gx = to_gpu(x), gnw = to_gpu(nw);
          const HcWeights gw = hc_to_gpu(w);
          Tensor gy = poisoned({t, d}, act), gpost = poisoned({t, n}, DType::kF32),
                 gcomb = poisoned({t, n, n}, DType::kF32);
          gpu().hc_pre_norm(gx, gw, options, gnw, 1e-6f, gy, gpost, gcomb);
          expect_parity(gy, y, act == DType::kF32 ? 1e-4 : kTolBf16);
          expect_parity(gpost, post, 1e-4);
          expect_parity(gcomb, comb, 1e-4);

          Tensor uy = poisoned({t, d}, act), upost = poisoned({t, n}, DType::kF32),
                 ucomb = poisoned({t, n, n}, DType::kF32);
          gpu().hc_pre(gx, gw, options, uy, upost, ucomb);
          gpu().rms_norm(uy, &gnw, 1e-6f, uy);
          expect_bits_equal(values(to_host(gy)), values(to_host(uy)));
          expect_bits_equal(values(to_host(gcomb)), values(to_host(ucomb)));

          Tensor oy = poisoned({1, d}, act), opost = poisoned({1, n}, DType::kF32),
                 ocomb = poisoned({1, n, n}, DType::kF32);
          gpu().hc_pre_norm(to_gpu(x.narrow(0, t - 1, 1)), gw, options, gnw, 1e-6f, oy, opost, ocomb);
          const std::vector<float> all = values(to_host(gy));
          expect_bits_equal(values(to_host(oy)), {all.end() - d, all.end()});
        }
}

TEST(CudaParity, MoeRouteMatchesCpuForEveryScoreFunctionAndHashRouting) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t t : {1, 37})
    for (ScoreFunc func : {ScoreFunc::kSqrtSoftplus, ScoreFunc::kSigmoid, ScoreFunc::kSoftmax})
      for (int mode = 0; mode < 3; ++mode) {  // 0: plain top-k, 1: with bias, 2: hash table
        SCOPED_TRACE(testing::Message() << "T=" << t << " func " << static_cast<int>(func) << " mode " << mode);
        const int e = 256, k = 6;
        const Tensor logits = random_tensor({t, e}, 71, 3.0f);
        const Tensor bias = random_tensor({e}, 72, 0.1f);
        const Tensor table = random_i32({1000, k}, 73, 0, e - 1);
        const Tensor tokens = random_i32({t}, 74, 0, 999);
        const RouteOptions options{k, 1.5f, func, func != ScoreFunc::kSoftmax, 0.0f};
        Tensor ids = Tensor::empty({t, k}, DType::kI32), w = Tensor::empty({t, k}, DType::kF32);
        backend().moe_route(logits, mode == 1 ? &bias : nullptr, mode == 2 ? &table : nullptr,
                            mode == 2 ? &tokens : nullptr, options, ids, w);
        Tensor gids = gpu().empty({t, k}, DType::kI32), gw = poisoned({t, k}, DType::kF32);
        const Tensor gbias = to_gpu(bias), gtable = to_gpu(table), gtokens = to_gpu(tokens);
        gpu().moe_route(to_gpu(logits), mode == 1 ? &gbias : nullptr, mode == 2 ? &gtable : nullptr,
                        mode == 2 ? &gtokens : nullptr, options, gids, gw);
        expect_i32_equal(gids, ids);
        expect_parity(gw, w, 1e-5);
      }
}

enum class ExpertFmt { kFp4, kFp8, kBF16 };

LinearWeight expert_weight(ExpertFmt f, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  const Tensor w = random_tensor({n, k}, seed, 0.05f);
  if (f == ExpertFmt::kFp4) return quantize_fp4(w);
  if (f == ExpertFmt::kFp8) return quantize_fp8_block(w, 128);
  return LinearWeight{WeightFormat::kBF16, w.to(DType::kBF16), Tensor(), 0};
}

// Distinct experts per token (top-k never repeats one), skewed towards low ids.
std::vector<std::int32_t> skewed_expert_ids(std::int64_t t, int k, int n_exp) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(t * k));
  std::mt19937 rng(82);
  for (std::int64_t i = 0; i < t; ++i) {
    std::vector<std::int32_t> perm(n_exp);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::sort(perm.begin(), perm.begin() + 3);
    for (int j = 0; j < k; ++j) ids[static_cast<std::size_t>(i * k + j)] = perm[static_cast<std::size_t>(j)];
  }
  return ids;
}

TEST(CudaParity, MoeExpertsMatchCpuThroughTheGroupedGemm) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 16, k = 6;
  const std::int64_t dim = 256, inter = 192;
  for (ExpertFmt f : {ExpertFmt::kFp4, ExpertFmt::kFp8, ExpertFmt::kBF16}) {
    std::vector<ExpertWeights> cpu_experts, gpu_experts;
    for (int e = 0; e < n_exp; ++e) {
      const auto seed = static_cast<std::uint32_t>(100 * e);
      ExpertWeights ew{expert_weight(f, inter, dim, seed), expert_weight(f, inter, dim, seed + 1),
                       expert_weight(f, dim, inter, seed + 2)};
      gpu_experts.push_back({to_gpu(ew.w1), to_gpu(ew.w3), to_gpu(ew.w2)});
      cpu_experts.push_back(std::move(ew));
    }
    for (std::int64_t t : {1, 5, 40, 200})
      for (int act : {0, 128})
      // default: the skinny FP8 tensor-core GEMM with FP8 act quant (items of 8 or 32 rows), else the
      // grouped GEMV / mma.sync pipeline; batch-invariant: mma.sync always.
      for (Backend* b : {&gpu(), &gpu_invariant()}) {
        SCOPED_TRACE(testing::Message() << "format " << static_cast<int>(f) << " T=" << t << " act " << act
                                        << " invariant " << (b == &gpu_invariant()));
        const Tensor x = random_tensor({t, dim}, 81, 1.0f, DType::kBF16);
        const Tensor id_t = i32_tensor({t, k}, skewed_expert_ids(t, k, n_exp));
        const Tensor wts = random_tensor({t, k}, 83, 0.3f);
        const MoeOptions options{10.0f, act, DType::kBF16};
        Tensor want = Tensor::empty({t, dim}, DType::kF32);
        backend().moe_experts(x, id_t, wts, cpu_experts, options, want);
        Tensor got = poisoned({t, dim}, DType::kF32, *b);
        b->moe_experts(to_gpu(x, *b), to_gpu(id_t, *b), to_gpu(wts, *b), gpu_experts, options, got);
        expect_parity(got, want, kTolBf16, *b);
      }
  }
}

// More experts than the sort kernel has threads (each thread scans a range of experts): every pair
// is still placed once, in expert order, on the FP8 path and the batch-invariant one.
TEST(CudaParity, MoeExpertsPlacePairsWhenExpertsOutnumberSortThreads) {
  DEEPINFER_REQUIRE_GPU();
  const int n_exp = 1200, k = 6;
  const std::int64_t dim = 128, inter = 128;
  std::vector<ExpertWeights> cpu_experts, gpu_experts;
  for (int e = 0; e < n_exp; ++e) {
    const auto seed = static_cast<std::uint32_t>(7 * e + 5);
    ExpertWeights ew{expert_weight(ExpertFmt::kFp8, inter, dim, seed),
                     expert_weight(ExpertFmt::kFp8, inter, dim, seed + 1),
                     expert_weight(ExpertFmt::kFp8, dim, inter, seed + 2)};
    gpu_experts.push_back({to_gpu(ew.w1), to_gpu(ew.w3), to_gpu(ew.w2)});
    cpu_experts.push_back(std::move(ew));
  }
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (std::int64_t t : {1, 300}) {
    const Tensor x = random_tensor({t, dim}, 61, 1.0f, DType::kBF16);
    const Tensor id_t = i32_tensor({t, k}, skewed_expert_ids(t, k, n_exp));
    const Tensor wts = random_tensor({t, k}, 63, 0.3f);
    Tensor want = Tensor::empty({t, dim}, DType::kF32);
    backend().moe_experts(x, id_t, wts, cpu_experts, options, want);
    for (Backend* b : {&gpu(), &gpu_invariant()}) {
      SCOPED_TRACE(testing::Message() << "T=" << t << " invariant " << (b == &gpu_invariant()));
      Tensor got = poisoned({t, dim}, DType::kF32, *b);
      b->moe_experts(to_gpu(x, *b), to_gpu(id_t, *b), to_gpu(wts, *b), gpu_experts, options, got);
      expect_parity(got, want, kTolBf16, *b);
    }
  }
}

// fp4 experts with dims % 128 == 0 and act block 128 (the mma.sync kernels, wgmma off): the
// 16-byte-load grouped GEMM (items of 8 rows at few rows per expert, 16 up to 16; more rows per expert
// take the 4-byte kernel) and the 4-byte-load kernel both match the CPU, and each repeats its bits.
// 16 experts of [384, 2048]: K split across warps (w1/w3 at small T); 64 experts of [512, 1024]:
// several work units per block, items of 8 and 16 rows.
TEST(CudaParity, MoeFp4ExpertsMatchCpuThroughTheWideLoadGemm) {
  DEEPINFER_REQUIRE_GPU();
  struct Path {
    const char* name;
    std::unique_ptr<Backend> backend;
  };
  std::vector<Path> paths;
  CudaBackendOptions wide_options;
  wide_options.moe_fp4_wide = true;
  wide_options.moe_fp4_wgmma = false;  // the mma.sync kernels under test
  paths.push_back({"wide regs", make_cuda_backend(wide_options)});
  CudaBackendOptions narrow_options;
  narrow_options.moe_fp4_wide = false;
  narrow_options.moe_fp4_wgmma = false;
  paths.push_back({"4-byte", make_cuda_backend(narrow_options)});
  const int k = 6;
  const MoeOptions options{10.0f, 128, DType::kBF16};
  struct Shape3 {
    int n_exp;
    std::int64_t dim, inter;
    std::vector<std::int64_t> tokens;
  };
  for (const Shape3& shape : {Shape3{16, 2048, 384, {1, 5, 12, 40, 120}}, Shape3{64, 1024, 512, {1, 40, 100}}}) {
    std::vector<ExpertWeights> cpu_experts, gpu_experts;
    for (int e = 0; e < shape.n_exp; ++e) {
      const auto seed = static_cast<std::uint32_t>(300 * e + shape.n_exp);
      ExpertWeights ew{expert_weight(ExpertFmt::kFp4, shape.inter, shape.dim, seed),
                       expert_weight(ExpertFmt::kFp4, shape.inter, shape.dim, seed + 1),
                       expert_weight(ExpertFmt::kFp4, shape.dim, shape.inter, seed + 2)};
      gpu_experts.push_back({to_gpu(ew.w1), to_gpu(ew.w3), to_gpu(ew.w2)});
      cpu_experts.push_back(std::move(ew));
    }
    for (std::int64_t t : shape.tokens) {
      const Tensor x = random_tensor({t, shape.dim}, 91, 1.0f, DType::kBF16);
      const Tensor id_t = i32_tensor({t, k}, skewed_expert_ids(t, k, shape.n_exp));
      const Tensor wts = random_tensor({t, k}, 93, 0.3f);
      Tensor want = Tensor::empty({t, shape.dim}, DType::kF32);
      backend().moe_experts(x, id_t, wts, cpu_experts, options, want);
      for (const Path& path : paths) {
        Backend* b = path.backend.get();
        SCOPED_TRACE(testing::Message() << shape.n_exp << " experts, T=" << t << " path " << path.name);
        const Tensor gx = to_gpu(x, *b), gid = to_gpu(id_t, *b), gw = to_gpu(wts, *b);
        Tensor got = poisoned({t, shape.dim}, DType::kF32, *b);
        b->moe_experts(gx, gid, gw, gpu_experts, options, got);
        expect_parity(got, want, kTolBf16, *b);
        Tensor again = poisoned({t, shape.dim}, DType::kF32, *b);
        b->moe_experts(gx, gid, gw, gpu_experts, options, again);
        const Tensor h1 = to_host(got, *b), h2 = to_host(again, *b);
        EXPECT_EQ(std::memcmp(h1.raw_data(), h2.raw_data(), static_cast<std::size_t>(h1.nbytes())), 0);
      }
    }
  }
}

// The routed experts' decode GEMMs on sm_90a warpgroup MMA (moe_fp4_wgmma.cu, CudaBackendOptions::
// moe_fp4_wgmma): e4m3 partials per 32-K weight-scale block, scaled in f32, summed in K order.
// The FP8 tensor-core bound of parity_linear_test.cpp, for the probe (one product per output: exact
// sums). Random experts keep the MoE tests' kTolBf16: the intermediate is re-quantised to e4m3 before
// w2, so ~1e-4 GEMM differences (wgmma's fp8 sums keep ~14 bits, DeepSeek-V3 sec. 3.3.2) flip some
// codes by one step (6-12%), which the bound must absorb; the measured errors are printed.
constexpr double kTolMoeWgmma = 1e-3;

std::unique_ptr<Backend> moe_wgmma_backend(bool wgmma) {
  CudaBackendOptions o;
  o.moe_fp4_wgmma = wgmma;
  o.moe_prefill_min_rows = 0;  // every T through the decode (skinny) items, up to 128 tokens
  return make_cuda_backend(o);
}

// Where two [T, dim] outputs differ most: a layout error of the kernel (descriptor, swizzle, fragment
// mapping) shows as a pattern of tokens / columns.
std::string worst_element(const Tensor& got, const Tensor& want) {
  const std::int64_t cols = want.dim(1);
  std::int64_t worst = 0;
  double worst_diff = -1.0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]);
    if (d > worst_diff || std::isnan(d)) {
      worst_diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
      worst = i;
    }
  }
  return fmt::format("worst |diff| {} at token {} column {} (got {}, want {})", worst_diff, worst / cols, worst % cols,
                     got.data<float>()[worst], want.data<float>()[worst]);
}

void check_wgmma_experts(int n_exp, int k, std::int64_t dim, std::int64_t inter, std::int64_t t,
                         const std::vector<ExpertWeights>& cpu_experts, const std::vector<ExpertWeights>& gpu_experts) {
  static const std::unique_ptr<Backend> wg = moe_wgmma_backend(true);
  static const std::unique_ptr<Backend> wide = moe_wgmma_backend(false);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  SCOPED_TRACE(testing::Message() << n_exp << " experts of [" << inter << ", " << dim << "], top-" << k << ", T=" << t);
  const Tensor x = random_tensor({t, dim}, 95, 1.0f, DType::kBF16);
  // (skewed_expert_ids needs more than k + 2 experts; one expert: every slot routes to it.)
  const Tensor id_t = i32_tensor({t, k}, n_exp > k + 2 ? skewed_expert_ids(t, k, n_exp)
                                                       : std::vector<std::int32_t>(static_cast<std::size_t>(t * k), 0));
  const Tensor wts = random_tensor({t, k}, 97, 0.3f);
  Tensor want = Tensor::empty({t, dim}, DType::kF32);
  backend().moe_experts(x, id_t, wts, cpu_experts, options, want);
  const Tensor gx = to_gpu(x, *wg), gid = to_gpu(id_t, *wg), gw = to_gpu(wts, *wg);
  Tensor got = poisoned({t, dim}, DType::kF32, *wg);
  wg->moe_experts(gx, gid, gw, gpu_experts, options, got);
  const Tensor h1 = to_host(got, *wg);
  const double err_cpu = rel_error(h1, want);
  EXPECT_LE(err_cpu, kTolBf16) << worst_element(h1, want);
  // Against the mma.sync kernel on the same e4m3 codes (only the order inside a 32-K step differs).
  Tensor ref = poisoned({t, dim}, DType::kF32, *wide);
  wide->moe_experts(to_gpu(x, *wide), to_gpu(id_t, *wide), to_gpu(wts, *wide), gpu_experts, options, ref);
  const Tensor h_ref = to_host(ref, *wide);
  const double err_mma = rel_error(h1, h_ref);
  EXPECT_LE(err_mma, kTolBf16) << worst_element(h1, h_ref);
  std::printf("moe_fp4_wgmma %d experts [%lld, %lld] top-%d T=%lld: relative error %.3e vs CPU, %.3e vs mma.sync "
              "(mma.sync vs CPU %.3e)\n",
              n_exp, static_cast<long long>(inter), static_cast<long long>(dim), k, static_cast<long long>(t), err_cpu,
              err_mma, rel_error(h_ref, want));
  Tensor again = poisoned({t, dim}, DType::kF32, *wg);
  wg->moe_experts(gx, gid, gw, gpu_experts, options, again);
  const Tensor h2 = to_host(again, *wg);
  EXPECT_EQ(std::memcmp(h1.raw_data(), h2.raw_data(), static_cast<std::size_t>(h1.nbytes())), 0);
}

std::vector<ExpertWeights> fp4_experts(int n_exp, std::int64_t dim, std::int64_t inter, std::uint32_t seed,
                                       std::vector<ExpertWeights>* gpu_experts) {
  std::vector<ExpertWeights> cpu_experts;
  for (int e = 0; e < n_exp; ++e) {
    const auto s = static_cast<std::uint32_t>(seed + 10 * e);
    ExpertWeights ew{expert_weight(ExpertFmt::kFp4, inter, dim, s), expert_weight(ExpertFmt::kFp4, inter, dim, s + 1),
                     expert_weight(ExpertFmt::kFp4, dim, inter, s + 2)};
    gpu_experts->push_back({to_gpu(ew.w1), to_gpu(ew.w3), to_gpu(ew.w2)});
    cpu_experts.push_back(std::move(ew));
  }
  return cpu_experts;
}

// The smallest shape the kernel takes, to debug its layout first: one expert, one token, dim = inter
// = 128, so each GEMM is two 64-row tiles of one 128-K stage (one act block, four weight-scale blocks)
// and items of 8 rows (wgmma m64n8k32) with a single live column.
TEST(CudaParity, MoeFp4WgmmaOneExpertOneTokenMatchesCpu) {
  DEEPINFER_REQUIRE_GPU();
  std::vector<ExpertWeights> gpu_experts;
  const std::vector<ExpertWeights> cpu_experts = fp4_experts(1, 128, 128, 700, &gpu_experts);
  check_wgmma_experts(1, 1, 128, 128, 1, cpu_experts, gpu_experts);
}

// A layout probe for the first device run: one expert, one token, dim = inter = 128. w1 = w3 read one
// input each (row n holds 1.0 at column p(n) = (37 n + 11) % 128, a permutation), w2 is the identity and
// the token's 128 inputs are distinct e4m3-exact values (8 binades x 8 mantissas x 2 signs, one act
// scale), so output column n is a function of x[p(n)] alone, exact up to SwiGLU's rounding. Where an
// output is off, the message names the CPU column(s) whose value it holds: a descriptor / swizzle error
// (wrong K read) or a fragment mapping error (wrong row or token written) shows as a pattern of columns.
TEST(CudaParity, MoeFp4WgmmaProbeNamesTheColumnEachOutputHolds) {
  DEEPINFER_REQUIRE_GPU();
  constexpr std::int64_t kD = 128;
  auto perm = [](std::int64_t n) { return (37 * n + 11) % kD; };
  Tensor sel = Tensor::zeros({kD, kD}, DType::kF32), eye = Tensor::zeros({kD, kD}, DType::kF32);
  Tensor xf = Tensor::empty({1, kD}, DType::kF32);
  for (std::int64_t n = 0; n < kD; ++n) {
    sel.data<float>()[n * kD + perm(n)] = 1.0f;
    eye.data<float>()[n * kD + n] = 1.0f;
    xf.data<float>()[n] = (n % 2 != 0 ? -1.0f : 1.0f) * (1.0f + static_cast<float>((n / 2) % 8) / 8.0f) *
                          std::ldexp(1.0f, static_cast<int>(n / 16) - 5);
  }
  std::vector<ExpertWeights> cpu_experts, gpu_experts;
  cpu_experts.push_back({quantize_fp4(sel), quantize_fp4(sel), quantize_fp4(eye)});
  gpu_experts.push_back({to_gpu(cpu_experts[0].w1), to_gpu(cpu_experts[0].w3), to_gpu(cpu_experts[0].w2)});
  const Tensor x = xf.to(DType::kBF16), id_t = i32_tensor({1, 1}, {0});
  Tensor wts = Tensor::empty({1, 1}, DType::kF32);
  wts.data<float>()[0] = 1.0f;
  const MoeOptions options{0.0f, 128, DType::kBF16};
  Tensor want = Tensor::empty({1, kD}, DType::kF32);
  backend().moe_experts(x, id_t, wts, cpu_experts, options, want);
  const std::unique_ptr<Backend> wg = moe_wgmma_backend(true);
  Tensor got_dev = poisoned({1, kD}, DType::kF32, *wg);
  wg->moe_experts(to_gpu(x, *wg), to_gpu(id_t, *wg), to_gpu(wts, *wg), gpu_experts, options, got_dev);
  const Tensor got = to_host(got_dev, *wg);
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  int reported = 0;
  for (std::int64_t n = 0; n < kD && reported < 16; ++n) {
    if (std::fabs(g[n] - w[n]) <= 0.07f * std::fabs(w[n])) continue;  // one e4m3 step of the intermediate
    std::string holds;
    for (std::int64_t m = 0; m < kD; ++m)
      if (std::fabs(g[n] - w[m]) <= 1e-6f * std::fabs(w[m]))
        holds += fmt::format(" {} (x[{}])", m, perm(m));
    ADD_FAILURE() << "output column " << n << " (reads x[" << perm(n) << "]): got " << g[n] << ", want " << w[n]
                  << "; equals the CPU's column(s)" << (holds.empty() ? " none" : holds);
    ++reported;
  }
  EXPECT_LE(rel_error(got, want), kTolMoeWgmma);
}

// The V4-Flash expert shape (w1 / w3 [2048, 4096], w2 [4096, 2048]) over 8 experts, top-6: T = 1 and
// 8 take items of 8 rows (m64n8k32), T = 16 items of 16, T = 32 and 128 items of 32 (several items
// per expert at 128); each result repeats its bits. Then a token's row alone (items of 8, its expert
// rows in column 0) against the same token in the batch of 32 (items of 32, other columns): the same
// bits if a wgmma column's sum depends on its own column only, whatever N (the kernel's K order is
// fixed by K alone, so this is the one thing the batch could change).
TEST(CudaParity, MoeFp4WgmmaExpertShapesMatchCpuAndTokensKeepTheirBitsAlone) {
  DEEPINFER_REQUIRE_GPU();
  constexpr int kExperts = 8, kTop = 6;
  constexpr std::int64_t kDim = 4096, kInter = 2048, kBatch = 32;
  std::vector<ExpertWeights> gpu_experts;
  const std::vector<ExpertWeights> cpu_experts = fp4_experts(kExperts, kDim, kInter, 800, &gpu_experts);
  for (std::int64_t t : {1, 8, 16, 32, 128})
    check_wgmma_experts(kExperts, kTop, kDim, kInter, t, cpu_experts, gpu_experts);

  const std::unique_ptr<Backend> wg = moe_wgmma_backend(true);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  const Tensor x = random_tensor({kBatch, kDim}, 95, 1.0f, DType::kBF16);
  const Tensor id_t = i32_tensor({kBatch, kTop}, skewed_expert_ids(kBatch, kTop, kExperts));
  const Tensor wts = random_tensor({kBatch, kTop}, 97, 0.3f);
  Tensor batch = poisoned({kBatch, kDim}, DType::kF32, *wg);
  wg->moe_experts(to_gpu(x, *wg), to_gpu(id_t, *wg), to_gpu(wts, *wg), gpu_experts, options, batch);
  const Tensor batch_h = to_host(batch, *wg);
  for (std::int64_t i : {0, 13, 31}) {
    Tensor alone = poisoned({1, kDim}, DType::kF32, *wg);
    wg->moe_experts(to_gpu(x.narrow(0, i, 1).clone(), *wg), to_gpu(id_t.narrow(0, i, 1).clone(), *wg),
                    to_gpu(wts.narrow(0, i, 1).clone(), *wg), gpu_experts, options, alone);
    const Tensor alone_h = to_host(alone, *wg);
    const Tensor in_batch = batch_h.narrow(0, i, 1).clone();
    EXPECT_EQ(std::memcmp(alone_h.raw_data(), in_batch.raw_data(), kDim * sizeof(float)), 0)
        << "token " << i << " alone vs in the batch of " << kBatch << ": " << worst_element(alone_h, in_batch);
  }
}

// A routed-experts case: T tokens of `dim` bf16 inputs, their top-k expert ids (skewed; one expert:
// every slot) and routing weights.
struct MoeInputs {
  Tensor x, id_t, wts;
};
MoeInputs moe_inputs(std::int64_t t, int k, int n_exp, std::int64_t dim) {
  return {random_tensor({t, dim}, 95, 1.0f, DType::kBF16),
          i32_tensor({t, k}, n_exp > k + 2 ? skewed_expert_ids(t, k, n_exp)
                                           : std::vector<std::int32_t>(static_cast<std::size_t>(t * k), 0)),
          random_tensor({t, k}, 97, 0.3f)};
}

// Odd and single 128-K stage counts (K = 384 / 640 / 128) for the register-A kernel's two-stage
// unrolled loop, at items of 8, 16 (register-A form) and 32 rows (shared-memory form).
TEST(CudaParity, MoeFp4WgmmaOddKStageCountsMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  std::vector<ExpertWeights> gpu_experts;
  const std::vector<ExpertWeights> cpu_experts = fp4_experts(4, 384, 640, 950, &gpu_experts);
  for (std::int64_t t : {1, 8, 16, 32}) check_wgmma_experts(4, 2, 384, 640, t, cpu_experts, gpu_experts);
}

// The CPU's output and backend a's (twice) and b's on the same inputs: a within the MoE bound of the CPU
// and of b, a repeating its bits. {want, a, b} for the caller's print.
struct MoeAb {
  Tensor want, a, b;
};
MoeAb check_moe_ab(Backend& a, Backend& b, const MoeInputs& in, const std::vector<ExpertWeights>& cpu_experts,
                   const std::vector<ExpertWeights>& gpu_experts, const MoeOptions& options) {
  const std::int64_t t = in.x.dim(0), dim = in.x.dim(1);
  MoeAb r{Tensor::empty({t, dim}, DType::kF32), {}, {}};
  backend().moe_experts(in.x, in.id_t, in.wts, cpu_experts, options, r.want);
  Tensor outs[3];
  for (int i = 0; i < 3; ++i) {  // a, a again, b
    Backend& be = i < 2 ? a : b;
    Tensor got = poisoned({t, dim}, DType::kF32, be);
    be.moe_experts(to_gpu(in.x, be), to_gpu(in.id_t, be), to_gpu(in.wts, be), gpu_experts, options, got);
    outs[i] = to_host(got, be);
  }
  EXPECT_LE(rel_error(outs[0], r.want), kTolBf16) << worst_element(outs[0], r.want);
  EXPECT_LE(rel_error(outs[0], outs[2]), kTolBf16) << worst_element(outs[0], outs[2]);
  EXPECT_EQ(std::memcmp(outs[0].raw_data(), outs[1].raw_data(), static_cast<std::size_t>(outs[0].nbytes())), 0);
  r.a = outs[0];
  r.b = outs[2];
  return r;
}

// K-permuted operands (CudaBackendOptions::moe_fp4_wgmma_permuted, the default) against the unpermuted
// form: the same products and 32-K partials up to the tensor core's order inside a step and a power of
// two, so both within the MoE bound of the CPU and of each other, at items of 8 / 16 (register-A: T = 1 /
// 32) and 32 (shared-memory form: T = 64), act blocks 128 and 32 (T = 1 / 32); each repeats its bits.
// Prints whether the bits agree.
TEST(CudaParity, MoeFp4WgmmaPermutedOperandsMatchTheUnpermutedForm) {
  DEEPINFER_REQUIRE_GPU();
  std::vector<ExpertWeights> gpu_experts;
  const std::vector<ExpertWeights> cpu_experts = fp4_experts(4, 384, 640, 1700, &gpu_experts);
  for (const int act : {128, 32}) {
    CudaBackendOptions on;
    on.moe_prefill_min_rows = 0;
    CudaBackendOptions off = on;
    off.moe_fp4_wgmma_permuted = false;
    const std::unique_ptr<Backend> perm = make_cuda_backend(on), plain = make_cuda_backend(off);
    const MoeOptions options{10.0f, act, DType::kBF16};
    for (std::int64_t t : act == 128 ? std::vector<std::int64_t>{1, 32, 64} : std::vector<std::int64_t>{1, 32}) {
      SCOPED_TRACE(testing::Message() << "act block " << act << ", T=" << t);
      const MoeAb r = check_moe_ab(*perm, *plain, moe_inputs(t, 2, 4, 384), cpu_experts, gpu_experts, options);
      std::printf("moe_fp4_wgmma K-permuted, act block %d, T=%lld: relative error %.3e vs CPU, %.3e vs unpermuted "
                  "(unpermuted vs CPU %.3e), bits %s\n",
                  act, static_cast<long long>(t), rel_error(r.a, r.want), rel_error(r.a, r.b), rel_error(r.b, r.want),
                  std::memcmp(r.a.raw_data(), r.b.raw_data(), static_cast<std::size_t>(r.a.nbytes())) == 0
                      ? "equal"
                      : "differ");
    }
  }
}

// V4.1's act block 32 through the register-A form (CudaBackendOptions::moe_fp4_wgmma_act32): each
// 32-K partial scaled by its own act scale and weight scale. Against the CPU and against the skinny
// mma.sync kernel V4.1 takes otherwise (the same e4m3 codes; only the order inside a 32-K step
// differs), items of 8 and 16 rows; each result repeats its bits.
void check_wgmma_act32(int n_exp, int k, std::int64_t dim, std::int64_t inter, std::uint32_t seed,
                       std::initializer_list<std::int64_t> tokens) {
  std::vector<ExpertWeights> gpu_experts;
  const std::vector<ExpertWeights> cpu_experts = fp4_experts(n_exp, dim, inter, seed, &gpu_experts);
  CudaBackendOptions on;
  on.moe_fp4_wgmma_act32 = true;
  on.moe_prefill_min_rows = 0;
  CudaBackendOptions off = on;
  off.moe_fp4_wgmma_act32 = false;
  const std::unique_ptr<Backend> wg = make_cuda_backend(on), skinny = make_cuda_backend(off);
  const MoeOptions options{10.0f, 32, DType::kBF16};
  for (std::int64_t t : tokens) {
    SCOPED_TRACE(testing::Message() << n_exp << " experts of [" << inter << ", " << dim << "], top-" << k << ", T=" << t);
    const MoeAb r = check_moe_ab(*wg, *skinny, moe_inputs(t, k, n_exp, dim), cpu_experts, gpu_experts, options);
    std::printf("moe_fp4_wgmma act block 32, %d experts [%lld, %lld] top-%d T=%lld: relative error %.3e vs CPU, "
                "%.3e vs the skinny kernel (skinny vs CPU %.3e)\n",
                n_exp, static_cast<long long>(inter), static_cast<long long>(dim), k, static_cast<long long>(t),
                rel_error(r.a, r.want), rel_error(r.a, r.b), rel_error(r.b, r.want));
  }
}

TEST(CudaParity, MoeFp4WgmmaActBlock32MatchesCpuAndTheSkinnyKernel) {
  DEEPINFER_REQUIRE_GPU();
  check_wgmma_act32(1, 1, 128, 128, 1300, {1});
  check_wgmma_act32(4, 2, 384, 640, 1350, {1, 8});
  check_wgmma_act32(8, 6, 4096, 2048, 1400, {1, 8, 16});
}

// Weight-scale codes 0 (2^-127) and 255 (NaN), which no quantiser writes: the register-A form converts
// codes by a shift into the exponent (0 -> 0, 255 -> inf) unless its CTA's scale table holds one of
// them. A w2 block of code 255 must make its output column NaN for every token, as on the CPU (a shift
// would give +-inf), in both forms (T = 1 / 16: register-A items of 8 / 16; T = 32: shared-memory items
// of 32), and a token keeps its bits alone and in the batch; code-0 blocks in w1 / w3 / w2 ride along.
// With K-permuted operands (the default) the shift takes code + 6: w3's code 249 (its first 64-row CTA
// then scales exactly) and 248 (the largest its second CTA shifts) check that bound; SwiGLU's clamp
// keeps their huge up values finite.
TEST(CudaParity, MoeFp4WgmmaScaleCodes0And255KeepTheirValues) {
  DEEPINFER_REQUIRE_GPU();
  constexpr std::int64_t kD = 128, kNanColumn = 5;
  std::vector<ExpertWeights> cpu_experts, gpu_experts;
  cpu_experts.push_back({expert_weight(ExpertFmt::kFp4, kD, kD, 1500), expert_weight(ExpertFmt::kFp4, kD, kD, 1501),
                         expert_weight(ExpertFmt::kFp4, kD, kD, 1502)});
  ExpertWeights& ew = cpu_experts.front();
  auto set_code = [](LinearWeight& w, std::int64_t row, std::int64_t block, std::uint8_t code) {
    w.scale.data<std::uint8_t>()[row * w.scale.dim(1) + block] = code;
  };
  set_code(ew.w1, 7, 2, 0);
  set_code(ew.w3, 11, 1, 0);
  set_code(ew.w2, 9, 0, 0);
  set_code(ew.w2, kNanColumn, 3, 255);
  set_code(ew.w3, 4, 3, 249);
  set_code(ew.w3, 70, 2, 248);
  gpu_experts.push_back({to_gpu(ew.w1), to_gpu(ew.w3), to_gpu(ew.w2)});
  const std::unique_ptr<Backend> wg = moe_wgmma_backend(true);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  Tensor row0[3];
  int n = 0;
  for (std::int64_t t : {1, 16, 32}) {
    SCOPED_TRACE(testing::Message() << "T=" << t);
    const auto [x, id_t, wts] = moe_inputs(t, 1, 1, kD);
    Tensor want = Tensor::empty({t, kD}, DType::kF32);
    backend().moe_experts(x, id_t, wts, cpu_experts, options, want);
    Tensor got_dev = poisoned({t, kD}, DType::kF32, *wg);
    wg->moe_experts(to_gpu(x, *wg), to_gpu(id_t, *wg), to_gpu(wts, *wg), gpu_experts, options, got_dev);
    const Tensor got = to_host(got_dev, *wg);
    double worst = 0.0, scale = 0.0;
    for (std::int64_t i = 0; i < got.numel(); ++i) {
      const float g = got.data<float>()[i], w = want.data<float>()[i];
      ASSERT_EQ(std::isnan(g), std::isnan(w)) << "token " << i / kD << " column " << i % kD << ": got " << g
                                              << ", want " << w;
      EXPECT_EQ(std::isnan(w), i % kD == kNanColumn) << "the CPU's NaNs: column " << i % kD;
      if (std::isnan(w)) continue;
      worst = std::max(worst, std::fabs(static_cast<double>(g) - w));
      scale = std::max(scale, std::fabs(static_cast<double>(w)));
    }
    EXPECT_LE(worst, kTolBf16 * scale);
    row0[n++] = got.narrow(0, 0, 1).clone();
  }
  // The same x rows lead every batch (moe_inputs draws them from one seed), so token 0 is the same token.
  for (int i = 1; i < 3; ++i)
    for (std::int64_t c = 0; c < kD; ++c) {
      const float a = row0[0].data<float>()[c], b = row0[i].data<float>()[c];
      EXPECT_TRUE(std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0)
          << "token 0, column " << c << ": " << a << " alone, " << b << " in batch " << i;
    }
}

}  // namespace
}  // namespace deepinfer::ops::test
