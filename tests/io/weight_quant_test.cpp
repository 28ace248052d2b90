// FP8-block and FP4 weight formats against hand-computed values, plus quantise/dequantise round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "io/weight_quant.h"
#include "tensor/float_formats.h"

namespace deepinfer::io {
namespace {

Tensor u8_tensor(DType dtype, const Shape& shape, std::initializer_list<std::uint8_t> bytes) {
  Tensor t = Tensor::empty(shape, dtype);
  std::copy(bytes.begin(), bytes.end(), t.data<std::uint8_t>());
  return t;
}

TEST(WeightQuant, Fp8BlockDequantMatchesHandComputedValues) {
  // E4M3 codes: 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0, 0x3C = 1.5, 0x30 = 0.5, 0x01 = 2^-9 (subnormal).
  const Tensor w = u8_tensor(DType::kF8E4M3, Shape{2, 3}, {0x38, 0x40, 0xB8, 0x3C, 0x30, 0x01});
  // Blocks of 1 row x 2 columns: scale [2, 2]. UE8M0 128 = 2, 126 = 0.5, 127 = 1, 137 = 1024.
  const Tensor s = u8_tensor(DType::kUE8M0, Shape{2, 2}, {128, 126, 127, 137});
  const Tensor out = dequantize_fp8_block(w, s, 1, 2);
  const float expected[6] = {1.0f * 2, 2.0f * 2, -1.0f * 0.5f, 1.5f * 1, 0.5f * 1, 1024.0f / 512.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.item_f32(i), expected[i]) << i;
  const Tensor bf16 = dequantize_fp8_block(w, s, 1, 2, DType::kBF16);
  EXPECT_EQ(bf16.dtype(), DType::kBF16);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(bf16.item_f32(i), expected[i]) << i;
}

TEST(WeightQuant, Fp8BlockAcceptsPartialBlocksAndFloatScales) {
  // 3x3 weight, 2x2 blocks: scale [2, 2] (ceil); HF's weight_scale_inv is f32.
  Tensor w = Tensor::empty(Shape{3, 3}, DType::kF8E4M3);
  for (int i = 0; i < 9; ++i) w.data<std::uint8_t>()[i] = 0x38;  // 1.0
  const std::vector<float> scales = {1.0f, 2.0f, 3.0f, 4.0f};
  const Tensor out = dequantize_fp8_block(w, Tensor::from_f32(Shape{2, 2}, scales), 2);
  const float expected[9] = {1, 1, 2, 1, 1, 2, 3, 3, 4};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(out.item_f32(i), expected[i]) << i;
}

TEST(WeightQuant, Fp4DequantUsesLowNibbleForEvenK) {
  // One row of K = 64 (32 bytes, two scale blocks). Byte 0 = 0x21: k0 = code 1 (0.5), k1 = code 2 (1.0).
  // Byte 1 = 0xAF: k2 = code 0xF (-6), k3 = code 0xA (-1). Everything else 0x77 (6, 6).
  Tensor w = Tensor::empty(Shape{1, 32}, DType::kI8);
  auto* bytes = w.data<std::uint8_t>();
  for (int i = 0; i < 32; ++i) bytes[i] = 0x77;
  bytes[0] = 0x21;
  bytes[1] = 0xAF;
  const Tensor s = u8_tensor(DType::kUE8M0, Shape{1, 2}, {129, 125});  // 4 and 0.25
  const Tensor out = dequantize_fp4(w, s);
  ASSERT_EQ(out.shape(), (Shape{1, 64}));
  EXPECT_EQ(out.item_f32(0), 0.5f * 4);
  EXPECT_EQ(out.item_f32(1), 1.0f * 4);
  EXPECT_EQ(out.item_f32(2), -6.0f * 4);
  EXPECT_EQ(out.item_f32(3), -1.0f * 4);
  EXPECT_EQ(out.item_f32(31), 6.0f * 4);
  EXPECT_EQ(out.item_f32(32), 6.0f * 0.25f);  // second scale block
  // The same bytes seen as kF4E2M1 give the same result.
  EXPECT_EQ(dequantize_fp4(fp4_view(w), s).item_f32(2), -24.0f);
}

TEST(WeightQuant, Fp4ViewIsZeroCopy) {
  Tensor packed = Tensor::zeros(Shape{4, 16}, DType::kU8);
  const Tensor view = fp4_view(packed);
  EXPECT_EQ(view.dtype(), DType::kF4E2M1);
  EXPECT_EQ(view.shape(), (Shape{4, 32}));
  EXPECT_EQ(view.raw_data(), packed.raw_data());
  EXPECT_THROW(fp4_view(Tensor::zeros(Shape{4}, DType::kF32)), Error);
}

TEST(WeightQuant, ShapeAndDtypeMismatchesAreErrors) {
  const Tensor w = Tensor::zeros(Shape{256, 256}, DType::kF8E4M3);
  EXPECT_THROW(dequantize_fp8_block(w, Tensor::zeros(Shape{2, 3}, DType::kUE8M0), 128), Error);
  EXPECT_THROW(dequantize_fp8_block(w, Tensor::zeros(Shape{2, 2}, DType::kI32), 128), Error);
  EXPECT_THROW(dequantize_fp8_block(Tensor::zeros(Shape{256, 256}, DType::kBF16), Tensor::zeros(Shape{2, 2}, DType::kUE8M0), 128),
               Error);
  EXPECT_THROW(dequantize_fp4(Tensor::zeros(Shape{2, 16}, DType::kI8), Tensor::zeros(Shape{2, 2}, DType::kUE8M0)), Error);
  EXPECT_THROW(dequantize_fp4(Tensor::zeros(Shape{2, 8}, DType::kI8), Tensor::zeros(Shape{2, 1}, DType::kUE8M0)), Error)
      << "K = 16 is not a multiple of 32";
  try {
    dequantize_fp8_block(w, Tensor::zeros(Shape{1, 1}, DType::kUE8M0), 128, 128, DType::kF32, "layers.0.attn.wq_a");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.wq_a"), std::string::npos) << e.what();
  }
}

Tensor random_weight(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> values(static_cast<std::size_t>(rows * cols));
  for (auto& v : values) v = normal(rng);
  return Tensor::from_f32(Shape{rows, cols}, values);
}

TEST(WeightQuant, Fp8QuantisationRoundTripsWithinE4M3Precision) {
  const Tensor w = random_weight(130, 260, 1);  // partial blocks on both axes
  const auto [q, s] = quantize_fp8_block(w, 128, 128);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  const Tensor back = dequantize_fp8_block(q, s, 128);
  for (std::int64_t i = 0; i < w.numel(); ++i) {
    const float x = w.item_f32(i), y = back.item_f32(i);
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * 0.0625f + 1e-6f) << i;  // 3 mantissa bits
  }
  // Block (1, 2) covers rows 128..129 and columns 256..259: its scale is the power of two at or
  // above amax / 448, so its largest element lands in (224, 448].
  float amax = 0.0f;
  for (int r = 128; r < 130; ++r)
    for (int c = 256; c < 260; ++c) amax = std::max(amax, std::fabs(w.item_f32(r * 260 + c)));
  const float scale = ue8m0_to_f32(s.data<std::uint8_t>()[5]);
  EXPECT_EQ(scale, std::exp2(std::ceil(std::log2(amax / 448.0f))));
  EXPECT_GT(amax / scale, 224.0f);
  EXPECT_LE(amax / scale, 448.0f);
}

TEST(WeightQuant, Fp4QuantisationIsExactOnTheE2M1Grid) {
  std::vector<float> values(64);
  for (int k = 0; k < 64; ++k) values[static_cast<std::size_t>(k)] = kE2M1Magnitudes[k % 8] * (k % 3 ? 0.5f : -0.5f);
  values[7] = 3.0f;  // block amax 3 -> scale 0.5 (pow2ceil(3/6)); 3 / 0.5 = 6 is on the grid
  const Tensor w = Tensor::from_f32(Shape{1, 64}, values);
  const auto [q, s] = quantize_fp4(w);
  EXPECT_EQ(q.dtype(), DType::kF4E2M1);
  EXPECT_EQ(s.shape(), (Shape{1, 2}));
  const Tensor back = dequantize_fp4(q, s);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(back.item_f32(k), values[static_cast<std::size_t>(k)]) << k;
}

}  // namespace
}  // namespace deepinfer::io
