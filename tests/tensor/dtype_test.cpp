// DType names and sizes.
#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace deepinfer {
namespace {

TEST(DType, SafetensorsNamesRoundTrip) {
  for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
                  DType::kUE8M0, DType::kI64, DType::kI32, DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
    const auto parsed = dtype_from_safetensors_name(dtype_safetensors_name(d));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_FALSE(dtype_from_safetensors_name("F4").has_value());
  EXPECT_EQ(dtype_from_name("bfloat16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("fp8"), DType::kF8E4M3);
}

TEST(DType, PackedFp4TakesHalfAByte) {
  EXPECT_EQ(dtype_bits(DType::kF4E2M1), 4);
  EXPECT_EQ(dtype_bytes(DType::kF4E2M1, 64), 32u);
  EXPECT_THROW(dtype_bytes(DType::kF4E2M1, 3), Error);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 3), 6u);
}

}  // namespace
}  // namespace deepinfer
