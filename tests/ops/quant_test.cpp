// Quantise→dequantise and the Walsh–Hadamard rotation, against values worked out by hand from
// MODEL_SPEC A3.2 (scale rounding, clamps, E4M3/E2M1 ties) and against the explicit matrix.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/quant.h"
#include "ops/op_test_util.h"

namespace deepinfer::ops {
namespace {

using test::values;

TEST(FakeQuantFp8, PowerOfTwoScaleFromTheBlockMaximum) {
  // amax 1 → 1/448 = 0.00223 → scale 2^-8; x/s = 256·x on the E4M3 grid.
  std::vector<float> v = {1.0f, 0.3f, -0.013f, 0.0f};
  cpu::fake_quant_fp8_span(v.data(), 4, 4);
  const float s = std::ldexp(1.0f, -8);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], round_to_e4m3(0.3f / s) * s);  // 76.8 → 80 (step 8 in [64, 128))
  EXPECT_EQ(v[1], 80.0f * s);
  EXPECT_EQ(v[2], round_to_e4m3(-0.013f / s) * s);
  EXPECT_EQ(v[3], 0.0f);
}

TEST(FakeQuantFp8, ExactPowerOfTwoTimesInverseDoesNotRoundUp) {
  // amax = 448 → 448·fp32(1/448) is exactly 1 only if the product rounds to 1; the bit trick then
  // leaves the scale at 1 and 448 stays 448.
  std::vector<float> v = {448.0f, -200.0f};
  cpu::fake_quant_fp8_span(v.data(), 2, 2);
  const float s = pow2_ceil(448.0f * (1.0f / 448.0f));
  EXPECT_EQ(v[0], round_to_e4m3(448.0f / s) * s);
  EXPECT_EQ(v[1], round_to_e4m3(-200.0f / s) * s);
}

TEST(FakeQuantFp8, TinyBlocksUseTheAmaxFloor) {
  std::vector<float> v = {1e-6f, 0.0f};
  cpu::fake_quant_fp8_span(v.data(), 2, 2);
  const float s = pow2_ceil(1e-4f * (1.0f / 448.0f));
  EXPECT_EQ(v[0], round_to_e4m3(1e-6f / s) * s);
}

TEST(FakeQuantFp8, BlocksAreIndependent) {
  std::vector<float> v = {100.0f, 1.0f, 0.01f, 0.0101f};
  cpu::fake_quant_fp8_span(v.data(), 4, 2);
  // Second block has its own small scale, so 0.0101 survives with 3 mantissa bits.
  EXPECT_NEAR(v[3], 0.0101f, 0.0101f / 8);
  EXPECT_NE(v[2], 0.0f);
}

TEST(FakeQuantFp4, Ue8m0ScaleAndTiesToEven) {
  // amax 6 → scale pow2ceil(1) = 1: x/s lands exactly on the tie points.
  std::vector<float> v = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.26f, 7.0f - 1.0f};
  cpu::fake_quant_fp4_span(v.data(), static_cast<std::int64_t>(v.size()), static_cast<int>(v.size()),
                           Fp4ScaleKind::kUE8M0);
  const std::vector<float> want = {6.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, -0.5f, 6.0f};
  test::expect_bits_equal(v, want);
}

TEST(FakeQuantFp4, E4m3ScaleIsTheRoundedAmaxOverSix) {
  std::vector<float> v = {7.0f, 1.0f};
  cpu::fake_quant_fp4_span(v.data(), 2, 2, Fp4ScaleKind::kE4M3);
  const float s = round_to_e4m3(7.0f / 6.0f);  // 1.1667 → 1.125
  EXPECT_EQ(s, 1.125f);
  EXPECT_EQ(v[0], 6.0f * s);  // 7/1.125 = 6.22 clamps to 6
  EXPECT_EQ(v[1], e2m1_to_f32(f32_to_e2m1(1.0f / s)) * s);
}

TEST(FakeQuant, OpsWorkOnColumnRangesOfBf16Rows) {
  cpu::CpuBackend backend;
  Tensor x = test::random_tensor(Shape{3, 8}, 1, 2.0f, DType::kBF16);
  const auto before = values(x);
  backend.fake_quant_fp8(x, 0, 4, 2);
  const auto after = values(x);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> head(before.begin() + r * 8, before.begin() + r * 8 + 4);
    cpu::fake_quant_fp8_span(head.data(), 4, 2);
    for (int c = 0; c < 8; ++c) {
      const float want = c < 4 ? round_to_bf16(head[static_cast<std::size_t>(c)]) : before[static_cast<std::size_t>(r * 8 + c)];
      EXPECT_EQ(after[static_cast<std::size_t>(r * 8 + c)], want);
    }
  }
  EXPECT_THROW(backend.fake_quant_fp8(x, 4, 9, 2), Error);
}

TEST(Hadamard, MatchesTheSylvesterMatrixAndIsItsOwnInverse) {
  const int n = 16;
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) + 0.1f * static_cast<float>(i);
  std::vector<float> h = v;
  cpu::hadamard_span(h.data(), n);
  for (int r = 0; r < n; ++r) {
    double want = 0;
    for (int c = 0; c < n; ++c) want += (std::popcount(static_cast<unsigned>(r & c)) % 2 ? -1.0 : 1.0) * v[static_cast<std::size_t>(c)];
    EXPECT_NEAR(h[static_cast<std::size_t>(r)], want / 4.0, 1e-5);
  }
  cpu::hadamard_span(h.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(h[static_cast<std::size_t>(i)], v[static_cast<std::size_t>(i)], 1e-5);
  cpu::CpuBackend backend;
  Tensor bad = Tensor::zeros(Shape{2, 12}, DType::kF32);
  EXPECT_THROW(backend.hadamard(bad), Error);
}

}  // namespace
}  // namespace deepinfer::ops
