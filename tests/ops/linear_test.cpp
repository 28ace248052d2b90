// The CPU linear against a double-precision product, across weight formats, with FP8 input
// fake-quant, strided views and — the property the CPU backend exists for — batch invariance.
#include <gtest/gtest.h>

#include "ops/cpu/gemm.h"
#include "ops/cpu/quant.h"
#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::backend;
using test::random_tensor;
using test::values;

LinearWeight f32_weight(const Tensor& w) { return {WeightFormat::kF32, w, Tensor(), 0}; }

Tensor run_linear(const Tensor& x, const LinearWeight& w, int act_block = 0, DType out_dtype = DType::kF32) {
  Tensor out = Tensor::empty(Shape{x.dim(0), w.out_features()}, out_dtype);
  backend().linear(x, w, LinearOptions{act_block}, out);
  return out;
}

std::vector<double> naive(const Tensor& x, const Tensor& w) {
  const std::int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  std::vector<double> out(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t c = 0; c < k; ++c) s += double(x.item_f32(i * k + c)) * double(w.item_f32(j * k + c));
      out[static_cast<std::size_t>(i * n + j)] = s;
    }
  return out;
}

TEST(CpuLinear, F32MatchesDoubleProduct) {
  for (std::int64_t k : {1, 15, 16, 33, 200}) {
    const Tensor x = random_tensor(Shape{7, k}, 1);
    const Tensor w = random_tensor(Shape{37, k}, 2);
    test::expect_near_rel(values(run_linear(x, f32_weight(w))), naive(x, w), 1e-5);
  }
}

TEST(CpuLinear, QuantisedFormatsEqualTheirDequantisedF32Weights) {
  const Tensor x = random_tensor(Shape{5, 256}, 3);
  const Tensor w = random_tensor(Shape{70, 256}, 4, 0.05f);
  const LinearWeight bf16{WeightFormat::kBF16, w.to(DType::kBF16), Tensor(), 0};
  test::expect_bits_equal(values(run_linear(x, bf16)), values(run_linear(x, f32_weight(bf16.data.to(DType::kF32)))));
  for (int block : {32, 128}) {
    const LinearWeight fp8 = test::quantize_fp8_block(w, block);
    test::expect_bits_equal(values(run_linear(x, fp8)), values(run_linear(x, f32_weight(test::dequantize(fp8)))));
  }
  const LinearWeight fp4 = test::quantize_fp4(w);
  test::expect_bits_equal(values(run_linear(x, fp4)), values(run_linear(x, f32_weight(test::dequantize(fp4)))));
  // Sanity: the quantised product is close to the unquantised one.
  test::expect_near_rel(values(run_linear(x, test::quantize_fp8_block(w, 128))), naive(x, w), 0.05);
}

TEST(CpuLinear, FloatScalesWorkLikeUe8m0Scales) {
  const Tensor x = random_tensor(Shape{3, 64}, 5);
  LinearWeight fp8 = test::quantize_fp8_block(random_tensor(Shape{40, 64}, 6), 32);
  LinearWeight f32_scaled = fp8;
  f32_scaled.scale = fp8.scale.to(DType::kF32);
  test::expect_bits_equal(values(run_linear(x, fp8)), values(run_linear(x, f32_scaled)));
}

TEST(CpuLinear, ActivationFakeQuantIsAppliedPerBlockBeforeTheProduct) {
  const Tensor x = random_tensor(Shape{4, 256}, 7, 3.0f);
  const LinearWeight w = test::quantize_fp8_block(random_tensor(Shape{24, 256}, 8), 128);
  Tensor xq = x.clone();
  for (std::int64_t r = 0; r < 4; ++r) cpu::fake_quant_fp8_span(xq.data<float>() + r * 256, 256, 128);
  test::expect_bits_equal(values(run_linear(x, w, 128)), values(run_linear(xq, w)));
  EXPECT_NE(values(run_linear(x, w, 128)), values(run_linear(x, w)));
}

TEST(CpuLinear, RowsDoNotDependOnTheBatchSize) {
  const Tensor w = random_tensor(Shape{100, 96}, 9);
  const LinearWeight fp4 = test::quantize_fp4(random_tensor(Shape{100, 96}, 10));
  for (const LinearWeight& weight : {f32_weight(w), fp4}) {
    const Tensor batch = random_tensor(Shape{67, 96}, 11);
    const auto all = values(run_linear(batch, weight, 32));
    for (std::int64_t m : {1, 3, 17, 66}) {
      const Tensor part = batch.narrow(0, 67 - m, m).clone();
      const auto got = values(run_linear(part, weight, 32));
      const std::vector<float> want(all.end() - m * 100, all.end());
      test::expect_bits_equal(got, want);
    }
  }
}

TEST(CpuLinear, StridedInputAndOutputViews) {
  const Tensor x = random_tensor(Shape{6, 2 * 48}, 12);
  const Tensor w = random_tensor(Shape{20, 48}, 13);
  Tensor out = Tensor::zeros(Shape{6, 3 * 20}, DType::kF32);
  Tensor out_view = out.narrow(1, 20, 20);
  backend().linear(x.narrow(1, 48, 48), f32_weight(w), {}, out_view);
  const auto want = values(run_linear(x.narrow(1, 48, 48).clone(), f32_weight(w)));
  const auto all = values(out);
  for (std::int64_t r = 0; r < 6; ++r)
    for (std::int64_t c = 0; c < 60; ++c) {
      const float v = all[static_cast<std::size_t>(r * 60 + c)];
      if (c >= 20 && c < 40) EXPECT_EQ(v, want[static_cast<std::size_t>(r * 20 + c - 20)]);
      else EXPECT_EQ(v, 0.0f);
    }
}

TEST(CpuLinear, Bf16OutputIsTheRoundedF32Output) {
  const Tensor x = random_tensor(Shape{5, 64}, 14, 1.0f, DType::kBF16);
  const LinearWeight w = f32_weight(random_tensor(Shape{33, 64}, 15));
  const auto f32 = values(run_linear(x, w));
  const auto bf16 = values(run_linear(x, w, 0, DType::kBF16));
  for (std::size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(bf16[i], round_to_bf16(f32[i]));
}

TEST(CpuLinear, EveryInstructionSetGivesTheSameBits) {
  const std::int64_t m = 9, n = 11, k16 = 80;
  const Tensor a = random_tensor(Shape{m, k16}, 16);
  const Tensor w = random_tensor(Shape{n, k16}, 17);
  using GemmFn = decltype(cpu::CpuKernels::gemm_block);
  using DotFn = decltype(cpu::CpuKernels::dot);
  auto run = [&](GemmFn fn) {
    std::vector<float> c(static_cast<std::size_t>(m * n));
    fn(a.data<float>(), k16, m, w.data<float>(), k16, n, k16, c.data(), n);
    return c;
  };
  auto dots = [&](DotFn fn, std::int64_t len) {  // len < k16: the tail path
    std::vector<float> c;
    for (std::int64_t i = 0; i < m; ++i) c.push_back(fn(a.data<float>() + i * k16, w.data<float>() + i * k16, len));
    return c;
  };
  const auto generic = run(&cpu::generic::gemm_block);
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    test::expect_bits_equal(run(&cpu::avx2::gemm_block), generic);
    test::expect_bits_equal(dots(&cpu::avx2::dot, 75), dots(&cpu::generic::dot, 75));
  }
  if (__builtin_cpu_supports("avx512f")) {
    test::expect_bits_equal(run(&cpu::avx512::gemm_block), generic);
    test::expect_bits_equal(dots(&cpu::avx512::dot, 75), dots(&cpu::generic::dot, 75));
  }
  // dot follows the GEMM's lane order.
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      EXPECT_EQ(cpu::dot_f32(a.data<float>() + i * k16, w.data<float>() + j * k16, k16),
                generic[static_cast<std::size_t>(i * n + j)]);
}

TEST(CpuLinear, RejectsMismatchedShapesAndScales) {
  const Tensor x = random_tensor(Shape{2, 64}, 18);
  Tensor out = Tensor::empty(Shape{2, 8}, DType::kF32);
  EXPECT_THROW(backend().linear(x, f32_weight(random_tensor(Shape{8, 32}, 19)), {}, out), Error);
  LinearWeight fp8 = test::quantize_fp8_block(random_tensor(Shape{8, 64}, 20), 32);
  fp8.scale = Tensor::empty(Shape{1, 1}, DType::kUE8M0);
  EXPECT_THROW(backend().linear(x, fp8, {}, out), Error);
}

TEST(CpuLinear, GroupedLinearIsTheBlockDiagonalProduct) {
  const std::int64_t groups = 3, m = 5, n = 7, k = 40;
  const Tensor x = random_tensor(Shape{m, groups * k}, 21);
  std::vector<LinearWeight> ws;
  for (std::int64_t g = 0; g < groups; ++g)
    ws.push_back(f32_weight(random_tensor(Shape{n, k}, 22 + static_cast<std::uint32_t>(g))));
  Tensor out = Tensor::empty(Shape{m, groups * n}, DType::kF32);
  backend().linear_grouped(x, ws, {}, out);
  for (std::int64_t g = 0; g < groups; ++g) {
    const Tensor xg = x.narrow(1, g * k, k).clone();
    const std::vector<double> want = naive(xg, ws[static_cast<std::size_t>(g)].data);
    std::vector<float> got;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) got.push_back(out.item_f32(i * groups * n + g * n + j));
    test::expect_near_rel(got, want, 1e-5);
  }
}

TEST(CpuLinear, GroupedLinearRejectsMismatchedGroups) {
  const Tensor x = random_tensor(Shape{2, 64}, 30);
  Tensor out = Tensor::empty(Shape{2, 16}, DType::kF32);
  const std::vector<LinearWeight> two = {f32_weight(random_tensor(Shape{8, 32}, 31)),
                                         f32_weight(random_tensor(Shape{8, 32}, 32))};
  EXPECT_NO_THROW(backend().linear_grouped(x, two, {}, out));
  const std::vector<LinearWeight> uneven = {two[0], f32_weight(random_tensor(Shape{8, 16}, 33))};
  EXPECT_THROW(backend().linear_grouped(x, uneven, {}, out), Error);
  const std::vector<LinearWeight> three = {two[0], two[1], two[0]};
  EXPECT_THROW(backend().linear_grouped(x, three, {}, out), Error);
  EXPECT_THROW(backend().linear_grouped(x, std::vector<LinearWeight>{}, {}, out), Error);
}

}  // namespace
}  // namespace deepinfer::ops
