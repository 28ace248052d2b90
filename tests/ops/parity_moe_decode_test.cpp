// CUDA parity of the routed experts' decode path options (session 9): the wgmma GEMMs' K order in two
// halves, split over CTAs for one token or walked by one CTA (CudaBackendOptions::moe_fp4_wgmma_ksplit,
// moe_fp4_wgmma_split_ctas), the prologue before griddepcontrol.wait and the w2 GEMM's early launch
// (moe_fp4_wgmma_early / _early_w2), and the 256-thread sort (moe_sort_small).
#include <cstdio>
#include <cstring>
#include <string>

#include "ops/moe_prefill_util.h"

namespace deepinfer::ops::test {
namespace {

// The decode items for every T (no prefill GEMM), with option assignments on top ("name=value,...").
std::unique_ptr<Backend> decode_backend(const std::string& options) {
  CudaBackendOptions o;
  o.moe_prefill_min_rows = 0;
  for (std::size_t at = 0; at < options.size();) {
    const std::size_t comma = std::min(options.find(',', at), options.size());
    set_cuda_option(o, options.substr(at, comma - at));
    at = comma + 1;
  }
  return make_cuda_backend(o);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.nbytes())) == 0;
}

// Backend `b`'s output on `in`, run twice: the second run must repeat the first's bits.
Tensor decode_run_twice(Backend& b, const PrefillStep& in, const PrefillExperts& ex, const MoeOptions& options) {
  const Tensor first = to_host(run_prefill_experts(b, in, ex, options), b);
  const Tensor again = to_host(run_prefill_experts(b, in, ex, options), b);
  EXPECT_TRUE(same_bits(first, again)) << "a second call gave other bits";
  return first;
}

// K order in two halves (moe_fp4_wgmma_ksplit = 2) against the CPU and against one sum over K (within the MoE bound:
// only the order differs), and bit for bit against the halves always walked by one CTA (the default
// splits them over two CTAs at one token), each repeating its bits, at items of 8 / 16 (register-A form)
// and 32 (shared-memory form). Shapes: V4-Flash's (both GEMMs split), dim 512 / inter 384 (w1 / w3 split, w2's
// three K tiles not), and odd tile counts (neither splits); act block 32 (V4.1) at items of 8 / 16.
TEST(CudaParity, MoeDecodeKHalvesMatchCpuAndGiveTheSameBitsSplitOrWalked) {
  DEEPINFER_REQUIRE_GPU();
  const std::unique_ptr<Backend> split = decode_backend("moe_fp4_wgmma_ksplit=2");
  const std::unique_ptr<Backend> whole = decode_backend("moe_fp4_wgmma_ksplit=1");
  const std::unique_ptr<Backend> walked = decode_backend("moe_fp4_wgmma_ksplit=2,moe_fp4_wgmma_split_ctas=0");
  struct Shape3 {
    int experts, k;
    std::int64_t dim, inter;
  };
  for (const Shape3 s : {Shape3{8, 6, 4096, 2048}, Shape3{4, 2, 512, 384}, Shape3{4, 2, 384, 640}}) {
    const PrefillExperts ex = prefill_fp4_experts(s.experts, s.dim, s.inter, 2100);
    for (const int act : {128, 32}) {
      const MoeOptions options{10.0f, act, DType::kBF16};
      for (std::int64_t t : act == 128 ? std::vector<std::int64_t>{1, 3, 8, 16, 32} : std::vector<std::int64_t>{1, 8}) {
        SCOPED_TRACE(testing::Message() << s.experts << " experts [" << s.inter << ", " << s.dim << "] act block "
                                        << act << " T=" << t);
        const PrefillStep in = prefill_step(t, s.dim, s.k, s.experts, 1, 2200 + static_cast<std::uint32_t>(t));
        const Tensor want = cpu_prefill_experts(in, ex, options);
        const Tensor a = decode_run_twice(*split, in, ex, options), b = decode_run_twice(*whole, in, ex, options);
        EXPECT_TRUE(same_bits(a, decode_run_twice(*walked, in, ex, options))) << "halves walked by one CTA";
        EXPECT_LE(rel_error(a, want), kTolBf16);
        EXPECT_LE(rel_error(a, b), kTolBf16);
        std::printf("moe decode [%lld, %lld] act %d T=%lld: K halves %.3e vs CPU, %.3e vs one K sum (that vs CPU "
                    "%.3e), bits %s\n",
                    static_cast<long long>(s.inter), static_cast<long long>(s.dim), act, static_cast<long long>(t),
                    rel_error(a, want), rel_error(a, b), rel_error(b, want), same_bits(a, b) ? "equal" : "differ");
      }
    }
  }
}

// With K in two halves a token's row alone (items of 8, halves split over CTAs) equals the same token's
// row in batches of 16 and 32 (items of 16, register-A; items of 32, shared-memory form; halves walked
// by one CTA): the K order is a function of K alone.
TEST(CudaParity, MoeDecodeKHalvesKeepATokensBitsAloneAndInABatch) {
  DEEPINFER_REQUIRE_GPU();
  constexpr std::int64_t kDim = 4096, kInter = 2048;
  const std::unique_ptr<Backend> b = decode_backend("moe_fp4_wgmma_ksplit=2");
  const PrefillExperts ex = prefill_fp4_experts(8, kDim, kInter, 2300);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (std::int64_t batch : {16, 32}) {
    const PrefillStep in = prefill_step(batch, kDim, 6, 8, 2, 2400);
    const Tensor all = to_host(run_prefill_experts(*b, in, ex, options), *b);
    for (std::int64_t i : {std::int64_t{0}, batch / 2 - 3, batch - 1}) {
      const PrefillStep one{in.x.narrow(0, i, 1).clone(), in.ids.narrow(0, i, 1).clone(),
                            in.wts.narrow(0, i, 1).clone()};
      const Tensor alone = to_host(run_prefill_experts(*b, one, ex, options), *b);
      EXPECT_TRUE(same_bits(alone, all.narrow(0, i, 1).clone()))
          << "token " << i << " alone vs in the batch of " << batch;
    }
  }
}

// The early prologue (reads before the wait), the w2 GEMM's early launch and the 256-thread sort change
// no bit: every combination against the defaults, over T = 1 .. 43 (252 pairs: the small sort; 258: the
// 1024-thread one), whole K and split, each call repeated; V4-Flash expert shapes over 8 experts.
TEST(CudaParity, MoeDecodeEarlyPrologueAndSmallSortGiveTheSameBits) {
  DEEPINFER_REQUIRE_GPU();
  constexpr std::int64_t kDim = 4096, kInter = 2048;
  const PrefillExperts ex = prefill_fp4_experts(8, kDim, kInter, 2500);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  for (const char* split : {"moe_fp4_wgmma_ksplit=2", "moe_fp4_wgmma_ksplit=1"}) {
    const std::string s = split;
    const std::unique_ptr<Backend> ref = decode_backend(s);
    const std::unique_ptr<Backend> late = decode_backend(s + ",moe_fp4_wgmma_early=0,moe_fp4_wgmma_early_w2=0");
    const std::unique_ptr<Backend> no_w2 = decode_backend(s + ",moe_fp4_wgmma_early_w2=0");
    const std::unique_ptr<Backend> big_sort = decode_backend(s + ",moe_sort_small=0");
    for (std::int64_t t : {1, 2, 5, 8, 42, 43}) {
      SCOPED_TRACE(testing::Message() << split << " T=" << t);
      const PrefillStep in = prefill_step(t, kDim, 6, 8, 3, 2600 + static_cast<std::uint32_t>(t));
      const Tensor want = decode_run_twice(*ref, in, ex, options);
      EXPECT_LE(rel_error(want, cpu_prefill_experts(in, ex, options)), kTolBf16);
      EXPECT_TRUE(same_bits(decode_run_twice(*late, in, ex, options), want)) << "prologue after the wait";
      EXPECT_TRUE(same_bits(decode_run_twice(*no_w2, in, ex, options), want)) << "w2 GEMM launched after the SwiGLU";
      EXPECT_TRUE(same_bits(decode_run_twice(*big_sort, in, ex, options), want)) << "1024-thread sort";
    }
  }
}

// The 256-thread sort with more experts than threads (each thread then owns two experts' counts and
// items): the same placement as the 1024-thread sort, hence the same bits.
TEST(CudaParity, MoeDecodeSmallSortPlacesPairsOfMoreExpertsThanThreads) {
  DEEPINFER_REQUIRE_GPU();
  constexpr int kExperts = 300;
  constexpr std::int64_t kD = 128;
  const PrefillExperts ex = prefill_fp4_experts(kExperts, kD, kD, 2700);
  const MoeOptions options{10.0f, 128, DType::kBF16};
  const std::unique_ptr<Backend> small = decode_backend(""), big = decode_backend("moe_sort_small=0");
  for (std::int64_t t : {1, 9, 31}) {
    SCOPED_TRACE(testing::Message() << "T=" << t);
    const PrefillStep in = prefill_step(t, kD, 8, kExperts, 4, 2800 + static_cast<std::uint32_t>(t));
    const Tensor a = decode_run_twice(*small, in, ex, options);
    EXPECT_TRUE(same_bits(a, decode_run_twice(*big, in, ex, options)));
    EXPECT_LE(rel_error(a, cpu_prefill_experts(in, ex, options)), kTolBf16);
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
