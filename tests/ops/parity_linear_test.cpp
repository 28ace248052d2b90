// CUDA vs CPU parity of linear(): every weight format (f32, bf16, fp8 128x128 and 32x32 blocks,
// fp4) over odd and model-sized shapes, batch 1 to large batch (split-K, tensor-core tiles, the
// cuBLASLt paths and the FP8 tensor-core paths: skinny GEMM and block-scaled cuBLASLt, each also
// forced at every M), FP8 activation quant, strided and bf16 inputs/outputs; the bf16 decode kernel
// and the grouped (block-diagonal) linear; plus the batch-invariant mode's promise that a row's
// result does not depend on the batch; the FP8 decode GEMM on wgmma (layout probe, decode shapes, bits).
#include "io/weight_quant.h"
#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

enum class Fmt { kF32, kBF16, kFp8b128, kFp8b32, kFp4 };

const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::kF32: return "f32";
    case Fmt::kBF16: return "bf16";
    case Fmt::kFp8b128: return "fp8/128";
    case Fmt::kFp8b32: return "fp8/32";
    case Fmt::kFp4: return "fp4";
  }
  return "?";
}

LinearWeight make_weight(Fmt f, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  const Tensor w = random_tensor({n, k}, seed, 0.05f);
  switch (f) {
    case Fmt::kF32: return LinearWeight{WeightFormat::kF32, w, Tensor(), 0};
    case Fmt::kBF16: return LinearWeight{WeightFormat::kBF16, w.to(DType::kBF16), Tensor(), 0};
    case Fmt::kFp8b128: return quantize_fp8_block(w, 128);
    case Fmt::kFp8b32: return quantize_fp8_block(w, 32);
    case Fmt::kFp4: return quantize_fp4(w);
  }
  return {};
}

struct Case {
  std::int64_t m, n, k;
};

// A non-batch-invariant backend with some options changed (made once per test binary by each caller).
template <typename Set>
std::unique_ptr<Backend> backend_with(Set set) {
  CudaBackendOptions options;
  options.batch_invariant = false;
  set(options);
  return make_cuda_backend(options);
}

// Backends that force one FP8 tensor-core path at every M: the skinny GEMM, or cuBLASLt's
// block-scaled FP8 GEMM (fp8 128-blocks; other formats then take the usual paths).
Backend& gpu_skinny_always() {
  static auto backend = backend_with([](CudaBackendOptions& o) {
    o.skinny_max_rows = 1 << 20;
    o.fp8_wgmma_decode = false;
  });
  return *backend;
}

Backend& gpu_fp8_cublas_always() {
  static auto backend = backend_with([](CudaBackendOptions& o) {
    o.skinny_max_rows = 0;
    o.fp8_wgmma_decode = false;
  });
  return *backend;
}

// FP8 tensor cores: products of e4m3 codes are exact, but Hopper's FP8 MMA aligns the products of
// one instruction to ~14 mantissa bits before adding (DeepSeek-V3 report, section 3.3.2); the f32
// promotion per 32-K step (skinny) or 128-K block (cuBLASLt) keeps it far below the bf16 bound.
constexpr double kTolFp8Mma = 1e-3;

// x bf16 (or act-quantised) makes every product exact in bf16, so only the f32 summation order
// differs from the CPU; f32 x rounded to bf16 operands lands within the bf16 bound.
void check_linear(Fmt f, const Case& c, DType x_dtype, int act_block, DType out_dtype, Backend& b = gpu()) {
  SCOPED_TRACE(testing::Message() << fmt_name(f) << " M=" << c.m << " N=" << c.n << " K=" << c.k << " x "
                                  << dtype_name(x_dtype) << " act " << act_block << " out " << dtype_name(out_dtype));
  const LinearWeight w = make_weight(f, c.n, c.k, static_cast<std::uint32_t>(c.n * 31 + c.k));
  const Tensor x = random_tensor({c.m, c.k}, static_cast<std::uint32_t>(c.m + 7), 1.0f, x_dtype);
  const LinearOptions options{act_block};
  Tensor want = Tensor::empty({c.m, c.n}, out_dtype);
  backend().linear(x, w, options, want);
  Tensor got = poisoned({c.m, c.n}, out_dtype, b);
  b.linear(to_gpu(x, b), to_gpu(w, b), options, got);
  const bool exact_operands = f == Fmt::kF32 || x_dtype == DType::kBF16 || act_block > 0;
  const bool fp8_mma = x_dtype == DType::kBF16 && act_block > 0 && (f == Fmt::kFp8b128 || f == Fmt::kFp8b32 ||
                                                                      f == Fmt::kFp4);
  const double tol = out_dtype == DType::kBF16 ? kTolBf16 : (fp8_mma ? kTolFp8Mma : (exact_operands ? 1e-4 : kTolBf16));
  expect_parity(got, want, tol, b);
}

TEST(CudaParity, LinearMatchesCpuForEveryFormatAndShape) {
  DEEPINFER_REQUIRE_GPU();
  const std::vector<Case> cases = {{1, 1, 64},    {1, 33, 96},     {2, 300, 160},   {3, 128, 1024}, {16, 64, 256},
                                   {17, 257, 512}, {64, 1000, 192}, {65, 128, 2048}, {130, 96, 4096}, {600, 320, 1024},
                                   {1, 1024, 4096}, {5, 4096, 1024}};
  for (Fmt f : {Fmt::kF32, Fmt::kBF16, Fmt::kFp8b128, Fmt::kFp8b32, Fmt::kFp4})
    for (const Case& c : cases) {
      check_linear(f, c, DType::kBF16, 0, DType::kF32);
      if (f == Fmt::kFp8b128 || f == Fmt::kFp4) check_linear(f, c, DType::kF32, 128, DType::kF32);
      if (f == Fmt::kFp8b32) check_linear(f, c, DType::kF32, 32, DType::kBF16);
      // reference-qat: bf16 x with FP8 act quant takes the FP8 tensor-core paths.
      if (f == Fmt::kFp8b128 || f == Fmt::kFp4 || f == Fmt::kFp8b32) {
        const int act = f == Fmt::kFp8b32 ? 32 : 128;
        check_linear(f, c, DType::kBF16, act, DType::kF32);
        check_linear(f, c, DType::kBF16, act, DType::kBF16);
        check_linear(f, c, DType::kBF16, act, DType::kF32, gpu_skinny_always());
        check_linear(f, c, DType::kBF16, act, DType::kF32, gpu_fp8_cublas_always());
      }
      // The batch-invariant backend runs the tensor-core kernel at every M (no GEMV, no cuBLASLt).
      check_linear(f, c, DType::kBF16, f == Fmt::kFp8b128 ? 128 : 0, DType::kF32, gpu_invariant());
    }
}

TEST(CudaParity, LinearHandlesOddKThroughTheFallback) {
  DEEPINFER_REQUIRE_GPU();
  for (Fmt f : {Fmt::kF32, Fmt::kBF16, Fmt::kFp8b128, Fmt::kFp8b32})
    for (const Case& c : std::vector<Case>{{1, 5, 1}, {7, 9, 100}, {33, 70, 999}, {600, 40, 77}}) {
      check_linear(f, c, DType::kF32, 0, DType::kF32);
      if (f == Fmt::kFp8b128) check_linear(f, c, DType::kF32, 128, DType::kF32);
    }
}

TEST(CudaParity, LinearReadsStridedRowsAndWritesStridedRows) {
  DEEPINFER_REQUIRE_GPU();
  const LinearWeight w = make_weight(Fmt::kFp8b128, 256, 512, 3);
  const Tensor wide_x = random_tensor({20, 700}, 4, 1.0f, DType::kBF16);
  const Tensor x = wide_x.narrow(1, 100, 512);
  Tensor want_wide = Tensor::zeros({20, 300}, DType::kF32);
  Tensor want = want_wide.narrow(1, 10, 256);
  backend().linear(x, w, LinearOptions{128}, want);
  Tensor got_wide = to_gpu(Tensor::zeros({20, 300}, DType::kF32));
  Tensor got = got_wide.narrow(1, 10, 256);
  gpu().linear(to_gpu(wide_x).narrow(1, 100, 512), to_gpu(w), LinearOptions{128}, got);
  expect_parity(got_wide, want_wide, kTolFp8Mma);
}

// The skinny bf16 tensor-core kernel for single linears too (the default runs it for linear_grouped
// only; single weights keep the GEMV up to 4 rows and mma.sync above, which check_linear covers).
Backend& gpu_bf16_skinny() {
  static auto backend = backend_with([](CudaBackendOptions& o) { o.bf16_skinny_linear = true; });
  return *backend;
}

// FP8-block groups through the skinny bf16 kernel (up to 32 rows) and the loop above, not the wgmma kernel.
Backend& gpu_grouped_fp8_skinny() {
  static auto backend = backend_with([](CudaBackendOptions& o) { o.grouped_fp8_wgmma = false; });
  return *backend;
}

TEST(CudaParity, Bf16DecodeLinearMatchesCpuThroughTheSkinnyKernel) {
  DEEPINFER_REQUIRE_GPU();
  // Odd N (tail tiles), K from one pass to several K splits, every row-group width, bf16 and f32 out.
  const std::vector<Case> cases = {{1, 16, 32},   {1, 33, 96},    {2, 1000, 4096}, {3, 129, 512}, {5, 4096, 1024},
                                   {8, 300, 2048}, {9, 64, 4096},  {16, 17, 256},  {17, 1024, 4096},
                                   {31, 200, 8192}, {32, 1024, 4096}, {32, 7, 64}};
  for (const Case& c : cases) {
    check_linear(Fmt::kBF16, c, DType::kBF16, 0, DType::kF32, gpu_bf16_skinny());
    check_linear(Fmt::kBF16, c, DType::kBF16, 0, DType::kBF16, gpu_bf16_skinny());
    check_linear(Fmt::kBF16, c, DType::kBF16, 0, DType::kF32);
  }
}

TEST(CudaParity, Bf16DecodeLinearRowsDoNotDependOnTheBatchUpTo32Rows) {
  DEEPINFER_REQUIRE_GPU();
  // The skinny kernel's K split is chosen from (N, K) alone: a row's bits are the same at M = 1 and 32.
  Backend& b = gpu_bf16_skinny();
  const LinearWeight w = to_gpu(make_weight(Fmt::kBF16, 2000, 4096, 41), b);
  const Tensor gx = to_gpu(random_tensor({32, 4096}, 42, 1.0f, DType::kBF16), b);
  Tensor all = b.empty({32, 2000}, DType::kF32);
  b.linear(gx, w, {}, all);
  const Tensor all_host = to_host(all, b);
  for (std::int64_t row : {0, 9, 31}) {
    Tensor one = b.empty({1, 2000}, DType::kF32);
    b.linear(gx.narrow(0, row, 1), w, {}, one);
    const Tensor one_host = to_host(one, b);
    for (std::int64_t j = 0; j < 2000; ++j)
      ASSERT_EQ(one_host.data<float>()[j], all_host.data<float>()[row * 2000 + j]) << "row " << row << " col " << j;
  }
}

// The FP8 decode kernel with the act quant fused at up to 8 rows (the default: 1 row), and the
// separate act-quant launch + skinny GEMM at every row count.
Backend& gpu_fp8_fused() {
  static auto backend = backend_with([](CudaBackendOptions& o) {
    o.fp8_fused_max_rows = 8;
    o.fp8_wgmma_decode = false;
  });
  return *backend;
}

Backend& gpu_separate_act_quant() {
  static auto backend = backend_with([](CudaBackendOptions& o) {
    o.fp8_fused_max_rows = 0;
    o.fp8_wgmma_decode = false;
  });
  return *backend;
}

TEST(CudaParity, Fp8DecodeWithTheActQuantFusedMatchesCpu) {
  DEEPINFER_REQUIRE_GPU();
  const std::vector<Case> cases = {{1, 16, 128},   {2, 1000, 4096}, {3, 129, 512}, {5, 4096, 1024},
                                   {7, 300, 8192}, {8, 2048, 4096}, {8, 33, 16384}};
  for (const Case& c : cases) {
    check_linear(Fmt::kFp8b128, c, DType::kBF16, 128, DType::kF32, gpu_fp8_fused());
    check_linear(Fmt::kFp8b128, c, DType::kBF16, 128, DType::kBF16, gpu_fp8_fused());
    check_linear(Fmt::kFp8b128, c, DType::kBF16, 64, DType::kF32, gpu_fp8_fused());
    check_linear(Fmt::kFp8b128, c, DType::kBF16, 128, DType::kF32);
    check_linear(Fmt::kFp8b128, c, DType::kBF16, 128, DType::kF32, gpu_separate_act_quant());
  }
}

TEST(CudaParity, Fp8DecodeWithTheActQuantFusedGivesTheSeparateQuantsBits) {
  DEEPINFER_REQUIRE_GPU();
  // Shapes whose K split is set by K and N alone (not by occupancy), so both kernels split alike: the
  // fused one must reproduce the separate act quant + skinny GEMM bit for bit (same e4m3 codes and
  // scales, same fragments, same per-step scaling and order).
  for (const Case& c : std::vector<Case>{{1, 64, 256}, {3, 128, 1024}, {8, 100, 2048}}) {
    SCOPED_TRACE(testing::Message() << "M=" << c.m << " N=" << c.n << " K=" << c.k);
    const LinearWeight w = make_weight(Fmt::kFp8b128, c.n, c.k, 77);
    const Tensor x = random_tensor({c.m, c.k}, 78, 1.0f, DType::kBF16);
    Backend& fb = gpu_fp8_fused();
    Tensor fused = poisoned({c.m, c.n}, DType::kF32, fb);
    fb.linear(to_gpu(x, fb), to_gpu(w, fb), LinearOptions{128}, fused);
    Backend& sep = gpu_separate_act_quant();
    Tensor separate = poisoned({c.m, c.n}, DType::kF32, sep);
    sep.linear(to_gpu(x, sep), to_gpu(w, sep), LinearOptions{128}, separate);
    const std::vector<float> a = values(to_host(fused, fb)), b = values(to_host(separate, sep));
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "element " << i;
  }
}

// linear_grouped on the GPU (one launch for bf16 weights up to 32 rows, else the loop) against the
// CPU op; with `same_bits`, also bit for bit against the loop of GPU linears over column views that
// defines it (a backend whose single linears take the same kernel, or a case that falls back to the loop).
void check_grouped(Fmt f, int groups, const Case& c, DType out_dtype, Backend& b, bool same_bits) {
  SCOPED_TRACE(testing::Message() << fmt_name(f) << " groups=" << groups << " M=" << c.m << " N=" << c.n
                                  << " K=" << c.k << " out " << dtype_name(out_dtype));
  std::vector<LinearWeight> ws, gws;
  for (int g = 0; g < groups; ++g) {
    ws.push_back(make_weight(f, c.n, c.k, static_cast<std::uint32_t>(100 + g)));
    gws.push_back(to_gpu(ws.back(), b));
  }
  // x is a column view of a wider tensor (the model passes o reshaped; views must work too).
  const Tensor wide = random_tensor({c.m, groups * c.k + 64}, static_cast<std::uint32_t>(c.m + 3), 1.0f, DType::kBF16);
  const Tensor x = wide.narrow(1, 64, groups * c.k);
  Tensor want = Tensor::empty({c.m, groups * c.n}, out_dtype);
  backend().linear_grouped(x, ws, {}, want);
  const Tensor gx = to_gpu(wide, b).narrow(1, 64, groups * c.k);
  Tensor got = poisoned({c.m, groups * c.n}, out_dtype, b);
  b.linear_grouped(gx, gws, {}, got);
  expect_parity(got, want, out_dtype == DType::kBF16 ? kTolBf16 : 1e-4, b);
  if (!same_bits) return;
  Tensor loop = poisoned({c.m, groups * c.n}, out_dtype, b);
  for (int g = 0; g < groups; ++g) {
    Tensor loop_g = loop.narrow(1, g * c.n, c.n);
    b.linear(gx.narrow(1, g * c.k, c.k), gws[static_cast<std::size_t>(g)], {}, loop_g);
  }
  const Tensor got_host = to_host(got, b), loop_host = to_host(loop, b);
  const std::vector<float> gv = values(got_host), lv = values(loop_host);
  for (std::size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(gv[i], lv[i]) << "element " << i;
}

TEST(CudaParity, GroupedLinearMatchesCpuAndTheLoopOfLinears) {
  DEEPINFER_REQUIRE_GPU();
  for (const Case& c : std::vector<Case>{{1, 1024, 4096}, {4, 64, 256}, {13, 33, 96}, {32, 128, 512}, {40, 64, 256}}) {
    check_grouped(Fmt::kBF16, 8, c, DType::kBF16, gpu(), false);
    check_grouped(Fmt::kBF16, 8, c, DType::kF32, gpu(), false);
    check_grouped(Fmt::kBF16, 8, c, DType::kF32, gpu_bf16_skinny(), true);
  }
  Backend& b = gpu_bf16_skinny();
  check_grouped(Fmt::kBF16, 16, {3, 48, 128}, DType::kBF16, b, true);
  check_grouped(Fmt::kBF16, 17, {3, 48, 128}, DType::kBF16, gpu(), true);  // more groups than one launch takes
  check_grouped(Fmt::kBF16, 2, {3, 48, 100}, DType::kF32, gpu(), true);    // K % 32 != 0: the loop
  check_grouped(Fmt::kF32, 3, {5, 40, 64}, DType::kF32, gpu(), true);
  check_grouped(Fmt::kFp8b128, 2, {5, 256, 256}, DType::kF32, gpu(), false);  // FP8 wo_a: one launch
  check_grouped(Fmt::kFp8b128, 2, {40, 256, 256}, DType::kF32, gpu_grouped_fp8_skinny(), true);  // the loop
  check_grouped(Fmt::kFp8b32, 3, {7, 64, 128}, DType::kBF16, gpu(), false);
  check_grouped(Fmt::kBF16, 8, {4, 64, 256}, DType::kF32, gpu_invariant(), true);
  check_grouped(Fmt::kFp8b128, 2, {4, 256, 256}, DType::kF32, gpu_invariant(), true);
}

// wo_a kept as FP8 blocks (Backend::grouped_fp8_weights) without the wgmma kernel (grouped_fp8_wgmma off;
// parity_grouped_fp8_test.cpp tests that one): the skinny kernel widens each code times its
// block scale to bf16 in registers, so it must give the bits of the same launch on the host's bf16
// dequantisation (io::dequantize_fp8_block), at every row count it serves (1..32: one, two and four
// groups of 8 rows), for 128- and 32-blocks, ue8m0 and f32 scales, bf16 and f32 outputs.
TEST(CudaParity, GroupedLinearOnFp8BlocksGivesTheBitsOfItsBf16Dequantisation) {
  DEEPINFER_REQUIRE_GPU();
  Backend& b = gpu_grouped_fp8_skinny();
  for (int block : {128, 32})
    for (bool f32_scale : {false, true})
      for (std::int64_t m : {1, 3, 8, 9, 16, 17, 32}) {
        const int groups = 8;
        const std::int64_t n = 256, k = 512;
        SCOPED_TRACE(testing::Message() << "block " << block << (f32_scale ? " f32" : " ue8m0") << " scales, M=" << m);
        std::vector<LinearWeight> fp8, bf16;
        for (int g = 0; g < groups; ++g) {
          LinearWeight q = quantize_fp8_block(random_tensor({n, k}, static_cast<std::uint32_t>(300 + g), 0.05f), block);
          if (f32_scale) {  // the same powers of two as f32 (how a checkpoint with float scales loads)
            Tensor sf = Tensor::empty(q.scale.shape(), DType::kF32);
            for (std::int64_t i = 0; i < sf.numel(); ++i)
              sf.data<float>()[i] = std::ldexp(1.0f, static_cast<int>(q.scale.data<std::uint8_t>()[i]) - 127);
            q.scale = sf;
          }
          const Tensor deq = io::dequantize_fp8_block(q.data, q.scale, block, block, DType::kBF16, "test wo_a");
          bf16.push_back(to_gpu(LinearWeight{WeightFormat::kBF16, deq, Tensor(), 0}, b));
          fp8.push_back(to_gpu(q, b));
        }
        const Tensor x = to_gpu(random_tensor({m, groups * k}, static_cast<std::uint32_t>(m), 1.0f, DType::kBF16), b);
        for (DType out_dtype : {DType::kBF16, DType::kF32}) {
          Tensor got = poisoned({m, groups * n}, out_dtype, b), want = poisoned({m, groups * n}, out_dtype, b);
          b.linear_grouped(x, fp8, {}, got);
          b.linear_grouped(x, bf16, {}, want);
          const std::vector<float> gv = values(to_host(got, b)), wv = values(to_host(want, b));
          for (std::size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(gv[i], wv[i]) << "element " << i;
        }
      }
}

TEST(CudaParity, GroupedLinearRejectsMismatchedWeights) {
  DEEPINFER_REQUIRE_GPU();
  const std::vector<LinearWeight> ws = {to_gpu(make_weight(Fmt::kBF16, 32, 64, 1)),
                                        to_gpu(make_weight(Fmt::kBF16, 32, 32, 2))};
  const Tensor x = gpu().empty({2, 128}, DType::kBF16);
  Tensor out = gpu().empty({2, 64}, DType::kF32);
  EXPECT_THROW(gpu().linear_grouped(x, ws, {}, out), Error);
  const std::vector<LinearWeight> same = {ws[0], ws[0]};
  Tensor narrow_out = gpu().empty({2, 32}, DType::kF32);
  EXPECT_THROW(gpu().linear_grouped(x, same, {}, narrow_out), Error);
}

TEST(CudaParity, BatchInvariantModeGivesEveryRowTheSameBitsAtAnyBatchSize) {
  DEEPINFER_REQUIRE_GPU();
  Backend& b = gpu_invariant();
  for (Fmt f : {Fmt::kBF16, Fmt::kFp8b128, Fmt::kFp4, Fmt::kF32}) {
    SCOPED_TRACE(fmt_name(f));
    const LinearWeight w = to_gpu(make_weight(f, 1024, 2048, 5), b);
    const Tensor x = random_tensor({700, 2048}, 6, 1.0f, DType::kBF16);
    const Tensor gx = to_gpu(x, b);
    Tensor all = b.empty({700, 1024}, DType::kF32);
    b.linear(gx, w, LinearOptions{128}, all);
    const Tensor all_host = to_host(all, b);
    for (std::int64_t row : {0, 17, 699}) {
      Tensor one = b.empty({1, 1024}, DType::kF32);
      b.linear(gx.narrow(0, row, 1), w, LinearOptions{128}, one);
      const Tensor one_host = to_host(one, b);
      for (std::int64_t j = 0; j < 1024; ++j)
        ASSERT_EQ(one_host.data<float>()[j], all_host.data<float>()[row * 1024 + j]) << "row " << row << " col " << j;
    }
  }
}

// ---- FP8 decode GEMM on sm_90a wgmma (fp8_wgmma_decode.cu; the default where measured faster) ------
// On a device without wgmma the backend takes the other FP8 paths and these tests still hold.
Backend& gpu_fp8_wgmma() {
  static auto backend = backend_with([](CudaBackendOptions& o) { o.fp8_wgmma_decode = true; });
  return *backend;
}

// The same weight with its ue8m0 block scales widened to f32 (DevWeight::scale_f32, the other scale form).
LinearWeight with_f32_scales(const LinearWeight& w) {
  LinearWeight f = w;
  f.scale = Tensor::empty(w.scale.shape(), DType::kF32);
  for (std::int64_t i = 0; i < w.scale.numel(); ++i) f.scale.data<float>()[i] = ue8m0_to_f32(w.scale.data<std::uint8_t>()[i]);
  return f;
}

TEST(CudaParity, Fp8WgmmaDecodeReadsEveryWeightElementAtItsPlaceInOneTile) {
  DEEPINFER_REQUIRE_GPU();
  // One 64x128 tile, K = 128: token t is one-hot at k_t, so out[t, n] is exactly W[n, k_t] (every
  // product but one is 0, the codes and pow2 scales are exact). A wrong descriptor, swizzle or
  // fragment mapping shows up as the W element actually read, found in the table of all of W.
  constexpr std::int64_t kN = 64, kK = 128, kM = 8;
  const LinearWeight w = make_weight(Fmt::kFp8b128, kN, kK, 91);
  Tensor eye = Tensor::empty({kK, kK}, DType::kF32);
  for (std::int64_t i = 0; i < kK * kK; ++i) eye.data<float>()[i] = i % (kK + 1) == 0 ? 1.0f : 0.0f;
  Tensor table = Tensor::empty({kK, kN}, DType::kF32);  // table[k, n] = W[n, k]
  backend().linear(eye.to(DType::kBF16), w, LinearOptions{128}, table);
  Tensor x = Tensor::empty({kM, kK}, DType::kF32);
  std::vector<std::int64_t> hot(kM);
  for (std::int64_t t = 0; t < kM; ++t) {
    hot[static_cast<std::size_t>(t)] = (17 * t + 3) % kK;  // every 16-byte chunk, both 32-K halves of a chunk pair
    for (std::int64_t k = 0; k < kK; ++k) x.data<float>()[t * kK + k] = k == hot[static_cast<std::size_t>(t)] ? 1.0f : 0.0f;
  }
  // ue8m0 and f32 weight scales.
  const LinearWeight w_f32 = with_f32_scales(w);
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(testing::Message() << (variant ? "f32" : "ue8m0") << " weight scales");
    Backend& b = gpu_fp8_wgmma();
    const LinearWeight& wv = variant ? w_f32 : w;
    Tensor got = poisoned({kM, kN}, DType::kF32, b);
    b.linear(to_gpu(x.to(DType::kBF16), b), to_gpu(wv, b), LinearOptions{128}, got);
    const Tensor got_host = to_host(got, b);
    const float* tab = table.data<float>();
    int failures = 0;
    for (std::int64_t t = 0; t < kM && failures < 8; ++t)
      for (std::int64_t n = 0; n < kN && failures < 8; ++n) {
        const std::int64_t kt = hot[static_cast<std::size_t>(t)];
        const float v = got_host.data<float>()[t * kN + n];
        if (v == tab[kt * kN + n]) continue;
        // e4m3 values repeat, so list the candidates in the same weight row and the same K column.
        std::string same_row, same_col;
        for (std::int64_t k2 = 0; k2 < kK; ++k2)
          if (tab[k2 * kN + n] == v) same_row += fmt::format(" {}", k2);
        for (std::int64_t n2 = 0; n2 < kN; ++n2)
          if (tab[kt * kN + n2] == v) same_col += fmt::format(" {}", n2);
        ++failures;
        ADD_FAILURE() << "token " << t << " row " << n << ": got " << v << ", want W[" << n << ", " << kt
                      << "] = " << tab[kt * kN + n] << "; equal to W[" << n << ", k] at k =" << same_row
                      << "; to W[n, " << kt << "] at n =" << same_col;
      }
  }
}

TEST(CudaParity, Fp8WgmmaDecodeMatchesCpuOnTheDecodeShapes) {
  DEEPINFER_REQUIRE_GPU();
  // wq_b, wo_b, wq_a, the shared expert's gate/up and down (V4-Flash), plus K-split and odd row counts.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {32768, 1024}, {4096, 8192}, {1024, 4096}, {2048, 4096}, {4096, 2048}, {64, 128}, {192, 16384}};
  for (const auto& [n, k] : shapes)
    for (std::int64_t m : {1, 3, 8, 17, 32, 40, 64}) {
      check_linear(Fmt::kFp8b128, Case{m, n, k}, DType::kBF16, 128, DType::kF32, gpu_fp8_wgmma());
      if (m == 1 || m == 64) check_linear(Fmt::kFp8b128, Case{m, n, k}, DType::kBF16, 128, DType::kBF16, gpu_fp8_wgmma());
    }
  // V4.1's 32x32 blocks with act block 32 (one partial per 32-K step), up to 32 rows; 33 rows go elsewhere.
  for (const auto& [n, k] : std::vector<std::pair<std::int64_t, std::int64_t>>{{4096, 5120}, {1536, 1024}, {64, 128}})
    for (std::int64_t m : {1, 5, 8, 16, 32, 33}) {
      check_linear(Fmt::kFp8b32, Case{m, n, k}, DType::kBF16, 32, DType::kF32, gpu_fp8_wgmma());
      if (m == 1) check_linear(Fmt::kFp8b32, Case{m, n, k}, DType::kBF16, 32, DType::kBF16, gpu_fp8_wgmma());
    }
  // Shapes the kernel does not take (N % 64, act block 64, 65 rows) still match through the other paths.
  for (const Case& c : std::vector<Case>{{5, 100, 1024}, {65, 128, 2048}})
    check_linear(Fmt::kFp8b128, c, DType::kBF16, 128, DType::kF32, gpu_fp8_wgmma());
  check_linear(Fmt::kFp8b128, Case{4, 256, 1024}, DType::kBF16, 64, DType::kF32, gpu_fp8_wgmma());
}

TEST(CudaParity, Fp8WgmmaDecodeDependentLaunchGivesThePlainLaunchsBits) {
  DEEPINFER_REQUIRE_GPU();
  // The GEMM launched as a programmatic dependent of its act quant (K split across CTAs, then the
  // reduce launch) gives the bits of a plain launch, call after call.
  static auto reduce = backend_with([](CudaBackendOptions& o) {
    o.fp8_wgmma_decode = true;
    o.dependent_launch = false;
  });
  static auto dependent = backend_with([](CudaBackendOptions& o) {
    o.fp8_wgmma_decode = true;
    o.dependent_launch = true;
  });
  Backend& b = *dependent;
  for (const auto& [n, k] : std::vector<std::pair<std::int64_t, std::int64_t>>{{4096, 8192}, {1024, 4096}, {512, 4096}})
    for (std::int64_t m : {1, 7, 32}) {
      SCOPED_TRACE(testing::Message() << "N=" << n << " K=" << k << " M=" << m);
      const LinearWeight w = make_weight(Fmt::kFp8b128, n, k, 57);
      const Tensor x = random_tensor({m, k}, 58, 1.0f, DType::kBF16);
      Tensor want = poisoned({m, n}, DType::kF32, *reduce);
      reduce->linear(to_gpu(x, *reduce), to_gpu(w, *reduce), LinearOptions{128}, want);
      const std::vector<float> want_v = values(to_host(want, *reduce));
      const LinearWeight gw = to_gpu(w, b);
      const Tensor gx = to_gpu(x, b);
      for (int call = 0; call < 3; ++call) {
        Tensor got = poisoned({m, n}, DType::kF32, b);
        b.linear(gx, gw, LinearOptions{128}, got);
        ASSERT_EQ(values(to_host(got, b)), want_v) << "call " << call;
      }
    }
}

TEST(CudaParity, Fp8WgmmaDecodeFusedQuantAndSplitFixUpGiveTheSeparateLaunchesBitsOnEveryCall) {
  DEEPINFER_REQUIRE_GPU();
  // The act quant inside the GEMM (each CTA quantises its own K range, <= 8 rows; hardware e4m3
  // rounding) and the split-K sums in the last CTA of each tile (per-tile counters every launch must
  // leave at zero, <= 8 rows) give the bits of the act-quant launch + GEMM + reduce launch, call after
  // call: each alone and both, ue8m0 and f32 weight scales, V4's 128- and V4.1's 32-blocks, K split
  // 1..64 ways (odd counts), bf16 and f32 out, x rows read in place from a wider tensor.
  static auto separate = backend_with([](CudaBackendOptions& o) {
    o.fp8_wgmma_fixup_max_rows = 0;
    o.fp8_wgmma_fused_quant_max_rows = 0;
  });
  static auto fixup = backend_with([](CudaBackendOptions& o) {
    o.fp8_wgmma_fixup_max_rows = 64;
    o.fp8_wgmma_fixup_max_splits = 1 << 20;  // (and several shared-memory chunks at 8 rows, > 8 splits)
    o.fp8_wgmma_fused_quant_max_rows = 0;
  });
  static auto fused = backend_with([](CudaBackendOptions& o) {
    o.fp8_wgmma_fixup_max_rows = 0;
    o.fp8_wgmma_fused_quant_max_rows = 8;
  });
  static auto both = backend_with([](CudaBackendOptions& o) {
    o.fp8_wgmma_fixup_max_rows = 64;
    o.fp8_wgmma_fixup_max_splits = 1 << 20;
    o.fp8_wgmma_fused_quant_max_rows = 8;
  });
  struct Shape {
    Fmt f;
    std::int64_t n, k;
  };
  const std::vector<Shape> shapes = {{Fmt::kFp8b128, 4096, 8192}, {Fmt::kFp8b128, 512, 4096},
                                     {Fmt::kFp8b128, 32768, 1024}, {Fmt::kFp8b128, 192, 16384},
                                     {Fmt::kFp8b128, 128, 640},    {Fmt::kFp8b128, 320, 2944},
                                     {Fmt::kFp8b128, 64, 128},     {Fmt::kFp8b32, 1536, 1024},
                                     {Fmt::kFp8b32, 4096, 5120},   {Fmt::kFp8b32, 64, 384}};
  for (const Shape& s : shapes) {
    const int act = s.f == Fmt::kFp8b32 ? 32 : 128;
    const LinearWeight w_ue8m0 = make_weight(s.f, s.n, s.k, static_cast<std::uint32_t>(s.n + s.k));
    const LinearWeight w_f32 = with_f32_scales(w_ue8m0);
    const Tensor wide = random_tensor({9, s.k + 16}, static_cast<std::uint32_t>(s.k), 1.0f, DType::kBF16);
    for (std::int64_t m : {1, 2, 5, 8, 9, 32}) {
      if (act == 32 && m > 8) continue;
      const bool f32_scales = m % 2 == 0;
      const DType out_dtype = m == 5 ? DType::kBF16 : DType::kF32;
      SCOPED_TRACE(testing::Message() << fmt_name(s.f) << " N=" << s.n << " K=" << s.k << " M=" << m
                                      << (f32_scales ? " f32" : " ue8m0") << " scales");
      const LinearWeight& w = f32_scales ? w_f32 : w_ue8m0;
      const Tensor tall = random_tensor({m, s.k}, static_cast<std::uint32_t>(m), 1.0f, DType::kBF16);
      // Up to 9 rows: a strided view (16-byte aligned rows) of the wider device tensor, read in place.
      auto rows_on = [&](Backend& b) {
        return m <= 9 ? to_gpu(wide, b).narrow(0, 0, m).narrow(1, 8, s.k) : to_gpu(tall, b);
      };
      Tensor want = poisoned({m, s.n}, out_dtype, *separate);
      separate->linear(rows_on(*separate), to_gpu(w, *separate), LinearOptions{act}, want);
      const std::vector<float> want_v = values(to_host(want, *separate));
      for (Backend* b : {fixup.get(), fused.get(), both.get()}) {
        const LinearWeight gw = to_gpu(w, *b);
        const Tensor gx = rows_on(*b);
        for (int call = 0; call < 3; ++call) {
          Tensor got = poisoned({m, s.n}, out_dtype, *b);
          b->linear(gx, gw, LinearOptions{act}, got);
          ASSERT_EQ(values(to_host(got, *b)), want_v)
              << (b == fixup.get() ? "fix-up" : b == fused.get() ? "fused quant" : "both") << ", call " << call;
        }
      }
    }
  }
}

TEST(CudaParity, Fp8WgmmaDecodeRowsDoNotDependOnTheBatch) {
  DEEPINFER_REQUIRE_GPU();
  // The K split comes from (N, K) alone and a column's wgmma result must not depend on the token
  // tile (N = 8 alone, 16, 32 or 64 in a batch): a row's bits are the same alone and in a batch, at
  // every row count the kernel takes for that shape (K = 1024: up to 32 rows; other kernels above).
  Backend& b = gpu_fp8_wgmma();
  struct Shape {
    std::int64_t n, k;
    std::vector<std::int64_t> rows;
  };
  for (const Shape& s : std::vector<Shape>{{4096, 8192, {64, 33, 20}}, {32768, 1024, {32, 17, 9}}, {4096, 5120, {32, 9}}}) {
    const std::int64_t n = s.n, k = s.k;
    const bool v41 = k == 5120;  // V4.1's 32x32 blocks, act block 32
    SCOPED_TRACE(testing::Message() << "N=" << n << " K=" << k);
    const LinearWeight w = to_gpu(make_weight(v41 ? Fmt::kFp8b32 : Fmt::kFp8b128, n, k, 43), b);
    const LinearOptions opt{v41 ? 32 : 128};
    const Tensor gx = to_gpu(random_tensor({64, k}, 44, 1.0f, DType::kBF16), b);
    for (std::int64_t rows : s.rows) {
      Tensor all = b.empty({rows, n}, DType::kF32);
      b.linear(gx.narrow(0, 0, rows), w, opt, all);
      const Tensor all_host = to_host(all, b);
      for (std::int64_t row : {std::int64_t{0}, rows / 2, rows - 1}) {
        Tensor one = b.empty({1, n}, DType::kF32);
        b.linear(gx.narrow(0, row, 1), w, opt, one);
        const Tensor one_host = to_host(one, b);
        for (std::int64_t j = 0; j < n; ++j)
          ASSERT_EQ(one_host.data<float>()[j], all_host.data<float>()[row * n + j])
              << "rows " << rows << " row " << row << " col " << j;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::ops::test
