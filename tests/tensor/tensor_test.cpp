// Tensor views, reshapes and host conversions.
#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tensor/float_formats.h"

namespace deepinfer {
namespace {

TEST(Tensor, NarrowAndSelectShareStorage) {
  std::vector<float> values(12);
  std::iota(values.begin(), values.end(), 0.0f);
  const Tensor t = Tensor::from_f32({3, 4}, values);
  const Tensor rows = t.narrow(0, 1, 2);
  EXPECT_EQ(rows.shape(), Shape({2, 4}));
  EXPECT_EQ(rows.item_f32(0), 4.0f);
  const Tensor cols = t.narrow(1, 1, 2);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.item_f32(2), 5.0f);
  const Tensor copy = cols.clone();
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_EQ(copy.data<float>()[3], 6.0f);
  EXPECT_EQ(t.select(2).shape(), Shape({4}));
  EXPECT_EQ(t.select(2).item_f32(3), 11.0f);
  EXPECT_EQ(rows.raw_data(), static_cast<const void*>(t.data<float>() + 4));
}

TEST(Tensor, ReshapeChecksElementCount) {
  const Tensor t = Tensor::zeros({2, 6}, DType::kBF16);
  EXPECT_EQ(t.reshape({3, 4}).shape(), Shape({3, 4}));
  EXPECT_THROW(t.reshape({5, 2}), Error);
  EXPECT_THROW(t.narrow(1, 4, 3), Error);
  EXPECT_THROW(t.narrow(2, 0, 1), Error);
}

TEST(Tensor, ConvertsPackedFp4AndBf16ToF32) {
  auto storage = std::make_shared<std::vector<std::uint8_t>>(std::vector<std::uint8_t>{fp4_pack(0x2, 0xf), fp4_pack(0x7, 0x1)});
  const Tensor packed = Tensor::view_of(storage->data(), {1, 4}, DType::kF4E2M1, storage);
  EXPECT_EQ(packed.nbytes(), 2u);
  const Tensor f = packed.to(DType::kF32);
  EXPECT_EQ(f.data<float>()[0], 1.0f);
  EXPECT_EQ(f.data<float>()[1], -6.0f);
  EXPECT_EQ(f.data<float>()[2], 6.0f);
  EXPECT_EQ(f.data<float>()[3], 0.5f);
  const Tensor b = f.to(DType::kBF16);
  EXPECT_EQ(b.to(DType::kF32).data<float>()[1], -6.0f);
  EXPECT_THROW(Tensor::view_of(storage->data(), {1, 3}, DType::kF4E2M1, storage), Error);
}

}  // namespace
}  // namespace deepinfer
