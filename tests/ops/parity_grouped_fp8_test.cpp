// CUDA vs CPU parity of the grouped FP8-block projection on Hopper wgmma (grouped_fp8_wgmma.cu: V4's wo_a
// kept as FP8 blocks): odd decode row counts on the V4 shape and small shapes, 128- and 32-blocks, ue8m0
// and f32 scales (powers of two and not), bf16 and f32 outputs, strided activations; the widening is
// exact (the bf16 dequantisation's products); a row's bits do not depend on the batch.
#include <map>

#include "io/weight_quant.h"
#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

// The wgmma kernel where the device has it, or the default dispatch elsewhere (then these check that):
// with 128-token tiles above 64 rows (the default) or 64-token tiles only (`wide` false).
Backend& gpu_grouped_wgmma(bool wide = true) {
  static std::map<bool, std::unique_ptr<Backend>> backends;
  std::unique_ptr<Backend>& backend = backends[wide];
  if (!backend) {
    CudaBackendOptions options;
    options.batch_invariant = false;
    options.grouped_fp8_wgmma = true;
    options.grouped_fp8_wgmma_wide = wide;
    backend = make_cuda_backend(options);
  }
  return *backend;
}

struct GroupedShape {
  int groups;
  std::int64_t n, k;
  int block;
};

// Scales as f32: the same powers of two (how a checkpoint with float scales loads), or, with
// `off_pow2`, each times 1.3 (no longer a power of two: the f32 widening path).
void to_f32_scales(LinearWeight& q, bool off_pow2) {
  Tensor sf = Tensor::empty(q.scale.shape(), DType::kF32);
  for (std::int64_t i = 0; i < sf.numel(); ++i)
    sf.data<float>()[i] =
        std::ldexp(1.0f, static_cast<int>(q.scale.data<std::uint8_t>()[i]) - 127) * (off_pow2 ? 1.3f : 1.0f);
  q.scale = sf;
}

std::vector<LinearWeight> grouped_weights(const GroupedShape& s, std::uint32_t seed, int scale_kind) {
  std::vector<LinearWeight> ws;
  for (int g = 0; g < s.groups; ++g) {
    LinearWeight q = quantize_fp8_block(random_tensor({s.n, s.k}, seed + static_cast<std::uint32_t>(g), 0.05f), s.block);
    if (scale_kind > 0) to_f32_scales(q, scale_kind == 2);
    ws.push_back(q);
  }
  return ws;
}

// x as a column view of a wider tensor (the model passes o reshaped; views must work).
Tensor wide_activations(std::int64_t m, std::int64_t width, std::uint32_t seed) {
  return random_tensor({m, width + 64}, seed, 1.0f, DType::kBF16);
}

void check_against_cpu(const GroupedShape& s, std::int64_t m, int scale_kind, DType out_dtype,
                       Backend& b = gpu_grouped_wgmma()) {
  SCOPED_TRACE(testing::Message() << s.groups << " x [" << s.n << ", " << s.k << "] block " << s.block << " M=" << m
                                  << " scales " << scale_kind << " out " << dtype_name(out_dtype));
  const std::vector<LinearWeight> ws = grouped_weights(s, 500, scale_kind);
  std::vector<LinearWeight> gws;
  for (const LinearWeight& w : ws) gws.push_back(to_gpu(w, b));
  const Tensor wide = wide_activations(m, s.groups * s.k, static_cast<std::uint32_t>(m + 7));
  const Tensor x = wide.narrow(1, 64, s.groups * s.k);
  Tensor want = Tensor::empty({m, s.groups * s.n}, out_dtype);
  backend().linear_grouped(x, ws, {}, want);
  Tensor got = poisoned({m, s.groups * s.n}, out_dtype, b);
  b.linear_grouped(to_gpu(wide, b).narrow(1, 64, s.groups * s.k), gws, {}, got);
  // f32 out: the products are the CPU's up to the weight's bf16 rounding (exact for power-of-two scales),
  // so only the summation order differs; bf16 out adds its rounding.
  const double tol = out_dtype == DType::kBF16 || scale_kind == 2 ? kTolBf16 : 1e-5;
  expect_parity(got, want, tol, b);
}

TEST(CudaParity, GroupedFp8WgmmaMatchesCpuOnTheV4ShapeAtDecodeRowCounts) {
  DEEPINFER_REQUIRE_GPU();
  const GroupedShape v4{8, 1024, 4096, 128};
  for (std::int64_t m : {1, 3, 8, 17, 32, 33, 100, 256}) check_against_cpu(v4, m, 0, DType::kBF16);
  check_against_cpu(v4, 5, 0, DType::kF32);
}

TEST(CudaParity, GroupedFp8WgmmaMatchesCpuOnSmallShapesBlocksAndScales) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t m : {1, 3, 8, 17, 32, 33, 100, 256}) {
    check_against_cpu({3, 64, 256, 128}, m, 0, DType::kF32);   // one 128-K stage per K half
    check_against_cpu({2, 128, 384, 32}, m, 1, DType::kBF16);  // V4.1's 32-blocks, f32 scales, odd stage count
  }
  check_against_cpu({2, 192, 128, 128}, 9, 0, DType::kF32);  // one stage: the second K half is empty
  check_against_cpu({4, 128, 512, 128}, 20, 2, DType::kF32);  // f32 scales off powers of two
  check_against_cpu({2, 64, 256, 32}, 40, 2, DType::kBF16);
}

// The widening gives exactly the bf16 dequantisation's weights (io::dequantize_fp8_block): against the
// default GPU path on those bf16 weights, f32 outputs differ by summation order only — a weight rounded
// differently would show as ~1e-3.
TEST(CudaParity, GroupedFp8WgmmaWidensToTheBf16DequantisationsWeights) {
  DEEPINFER_REQUIRE_GPU();
  Backend& b = gpu_grouped_wgmma();
  for (int scale_kind : {0, 1, 2})
    for (int block : {128, 32}) {
      SCOPED_TRACE(testing::Message() << "block " << block << " scales " << scale_kind);
      const GroupedShape s{4, 256, 1024, block};
      const std::vector<LinearWeight> ws = grouped_weights(s, 700, scale_kind);
      std::vector<LinearWeight> fp8, bf16;
      for (const LinearWeight& q : ws) {
        const Tensor deq = io::dequantize_fp8_block(q.data, q.scale, block, block, DType::kBF16, "test wo_a");
        bf16.push_back(to_gpu(LinearWeight{WeightFormat::kBF16, deq, Tensor(), 0}, b));
        fp8.push_back(to_gpu(q, b));
      }
      for (std::int64_t m : {1, 24, 70}) {
        const Tensor x = to_gpu(random_tensor({m, s.groups * s.k}, static_cast<std::uint32_t>(m), 1.0f, DType::kBF16), b);
        Tensor got = poisoned({m, s.groups * s.n}, DType::kF32, b), want = poisoned({m, s.groups * s.n}, DType::kF32, b);
        b.linear_grouped(x, fp8, {}, got);
        b.linear_grouped(x, bf16, {}, want);
        expect_parity(got, to_host(want, b), 1e-5, b);
      }
    }
}

// Every weight element lands at its place with its exact bf16 value, e4m3 subnormals and signed zeros
// included: activation row i is one-hot at column i of the grouped K, so out[i, g n + r] = W_g[r, i - g k]
// exactly (one product; every code byte but NaN, random scales; ue8m0, f32 powers of two, f32 off them).
TEST(CudaParity, GroupedFp8WgmmaPutsEveryExactWeightAtItsPlace) {
  DEEPINFER_REQUIRE_GPU();
  Backend& b = gpu_grouped_wgmma();
  for (int scale_kind : {0, 1, 2})
    for (int block : {128, 32}) {
      SCOPED_TRACE(testing::Message() << "block " << block << " scales " << scale_kind);
      const GroupedShape s{2, 128, 256, block};
      std::vector<LinearWeight> gws;
      std::vector<Tensor> deq;
      for (int g = 0; g < s.groups; ++g) {
        LinearWeight q = quantize_fp8_block(random_tensor({s.n, s.k}, 40 + static_cast<std::uint32_t>(g), 0.05f), block);
        auto* codes = q.data.data<std::uint8_t>();
        for (std::int64_t i = 0; i < q.data.numel(); ++i) {
          const auto c = static_cast<std::uint8_t>((i * 97 + g * 13) % 256);
          codes[i] = (c & 0x7f) == 0x7f ? static_cast<std::uint8_t>(c - 1) : c;  // no NaN codes
        }
        for (std::int64_t i = 0; i < q.scale.numel(); ++i)
          q.scale.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(112 + (i * 5 + g) % 20);
        if (scale_kind > 0) to_f32_scales(q, scale_kind == 2);
        deq.push_back(io::dequantize_fp8_block(q.data, q.scale, block, block, DType::kBF16, "test wo_a").to(DType::kF32));
        gws.push_back(to_gpu(q, b));
      }
      const std::int64_t width = s.groups * s.k;  // 512 one-hot rows, in two launches of 256
      Tensor eye = Tensor::empty({width, width}, DType::kF32);
      for (std::int64_t i = 0; i < width * width; ++i) eye.data<float>()[i] = i % (width + 1) == 0 ? 1.0f : 0.0f;
      const Tensor gx = to_gpu(eye.to(DType::kBF16), b);
      for (std::int64_t first : {0, 256}) {
        Tensor out = poisoned({256, s.groups * s.n}, DType::kF32, b);
        b.linear_grouped(gx.narrow(0, first, 256), gws, {}, out);
        const Tensor host = to_host(out, b);
        for (std::int64_t i = 0; i < 256; ++i) {
          const std::int64_t col = first + i, g = col / s.k;
          for (std::int64_t o = 0; o < s.groups * s.n; ++o) {
            const float want = o / s.n == g ? deq[static_cast<std::size_t>(g)].data<float>()[(o % s.n) * s.k + col % s.k]
                                            : 0.0f;
            ASSERT_EQ(host.data<float>()[i * s.groups * s.n + o], want) << "one-hot row " << col << " output " << o;
          }
        }
      }
    }
}

// The K split is fixed by K and a column's wgmma result must not depend on the token tile (N = 8 alone,
// 16 / 32 / 64 in a batch, 64- or 128-token tiles above): a row's bits are the same alone and in a batch.
void expect_same_bits_alone_and_in_a_batch(Backend& b) {
  const GroupedShape v4{8, 1024, 4096, 128};
  const std::int64_t width = v4.groups * v4.n;
  std::vector<LinearWeight> gws;
  for (const LinearWeight& w : grouped_weights(v4, 900, 0)) gws.push_back(to_gpu(w, b));
  const Tensor gx = to_gpu(random_tensor({256, v4.groups * v4.k}, 901, 1.0f, DType::kBF16), b);
  for (std::int64_t rows : {256, 100, 33, 17, 9}) {
    Tensor all = b.empty({rows, width}, DType::kF32);
    b.linear_grouped(gx.narrow(0, 0, rows), gws, {}, all);
    const Tensor all_host = to_host(all, b);
    for (std::int64_t row : {std::int64_t{0}, rows / 2, rows - 1}) {
      Tensor one = b.empty({1, width}, DType::kF32);
      b.linear_grouped(gx.narrow(0, row, 1), gws, {}, one);
      const Tensor one_host = to_host(one, b);
      for (std::int64_t j = 0; j < width; ++j)
        ASSERT_EQ(one_host.data<float>()[j], all_host.data<float>()[row * width + j])
            << "rows " << rows << " row " << row << " col " << j;
    }
  }
}

TEST(CudaParity, GroupedFp8WgmmaGivesARowTheSameBitsAloneAndInABatch) {
  DEEPINFER_REQUIRE_GPU();
  expect_same_bits_alone_and_in_a_batch(gpu_grouped_wgmma());
}

// 64-token tiles only (grouped_fp8_wgmma_wide off) keep CPU parity and per-row bits; 128-token tiles
// give the very bits of 64-token ones.
TEST(CudaParity, GroupedFp8WgmmaNarrowTilesMatchCpuAndWideTilesKeepTheirBits) {
  DEEPINFER_REQUIRE_GPU();
  Backend& narrow = gpu_grouped_wgmma(false);
  Backend& wide = gpu_grouped_wgmma(true);
  const GroupedShape v4{8, 1024, 4096, 128};
  for (std::int64_t m : {1, 33, 100}) check_against_cpu(v4, m, 0, DType::kBF16, narrow);
  check_against_cpu({2, 128, 384, 32}, 70, 1, DType::kF32, wide);
  expect_same_bits_alone_and_in_a_batch(narrow);
  std::vector<LinearWeight> nws, wws;
  for (const LinearWeight& w : grouped_weights(v4, 950, 0)) {
    nws.push_back(to_gpu(w, narrow));
    wws.push_back(to_gpu(w, wide));
  }
  for (std::int64_t m : {65, 200, 256}) {
    const Tensor x = random_tensor({m, v4.groups * v4.k}, static_cast<std::uint32_t>(m + 3), 1.0f, DType::kBF16);
    Tensor a = narrow.empty({m, v4.groups * v4.n}, DType::kF32), c = wide.empty({m, v4.groups * v4.n}, DType::kF32);
    narrow.linear_grouped(to_gpu(x, narrow), nws, {}, a);
    wide.linear_grouped(to_gpu(x, wide), wws, {}, c);
    const Tensor ah = to_host(a, narrow), ch = to_host(c, wide);
    for (std::int64_t i = 0; i < ah.numel(); ++i)
      ASSERT_EQ(ah.data<float>()[i], ch.data<float>()[i]) << "M=" << m << " element " << i;
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
