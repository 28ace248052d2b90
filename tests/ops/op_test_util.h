// Helpers for the op tests: seeded random tensors, f32 views and bit-exact comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/op_types.h"
#include "tensor/float_formats.h"
#include "tensor/tensor.h"

namespace deepinfer::ops::test {

// One CPU backend shared by a test binary.
inline cpu::CpuBackend& backend() {
  static cpu::CpuBackend b;
  return b;
}

inline Tensor random_tensor(const Shape& shape, std::uint32_t seed, float scale = 1.0f, DType dtype = DType::kF32) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  Tensor t = Tensor::from_f32(shape, v);
  return dtype == DType::kF32 ? t : t.to(dtype);
}

inline std::vector<float> values(const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) v[static_cast<std::size_t>(i)] = t.item_f32(i);
  return v;
}

inline Tensor i32_tensor(const Shape& shape, const std::vector<std::int32_t>& v) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  std::memcpy(t.raw_data(), v.data(), v.size() * 4);
  return t;
}

// Bitwise equality of two float vectors (distinguishes nothing NaN-related; tests avoid NaN).
inline void expect_bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "element " << i;
}

inline void expect_near_rel(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  double max_abs = 0.0;
  for (double w : want) max_abs = std::max(max_abs, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * std::max(max_abs, 1e-30)) << "element " << i;
}

// An f32 [out, in] matrix quantised like DeepSeek's checkpoints: E4M3 values with one
// power-of-two UE8M0 scale per block × block tile.
inline LinearWeight quantize_fp8_block(const Tensor& w, int block) {
  const std::int64_t n = w.dim(0), k = w.dim(1);
  const std::int64_t sn = (n + block - 1) / block, sk = (k + block - 1) / block;
  LinearWeight q{WeightFormat::kFp8Block, Tensor::empty(w.shape(), DType::kF8E4M3),
                 Tensor::empty(Shape{sn, sk}, DType::kUE8M0), block};
  const float* src = w.data<float>();
  for (std::int64_t bi = 0; bi < sn; ++bi)
    for (std::int64_t bj = 0; bj < sk; ++bj) {
      float amax = 1e-12f;
      for (std::int64_t r = bi * block; r < std::min(n, (bi + 1) * block); ++r)
        for (std::int64_t c = bj * block; c < std::min(k, (bj + 1) * block); ++c)
          amax = std::max(amax, std::fabs(src[r * k + c]));
      const std::uint8_t code = ue8m0_ceil_code(amax / kE4M3Max);
      q.scale.data<std::uint8_t>()[bi * sk + bj] = code;
      const float s = ue8m0_to_f32(code);
      for (std::int64_t r = bi * block; r < std::min(n, (bi + 1) * block); ++r)
        for (std::int64_t c = bj * block; c < std::min(k, (bj + 1) * block); ++c)
          q.data.data<std::uint8_t>()[r * k + c] = f32_to_e4m3(src[r * k + c] / s);
    }
  return q;
}

// An f32 [out, in] matrix as packed FP4 E2M1 with one UE8M0 scale per 32 elements of a row.
inline LinearWeight quantize_fp4(const Tensor& w) {
  const std::int64_t n = w.dim(0), k = w.dim(1);
  LinearWeight q{WeightFormat::kFp4, Tensor::zeros(w.shape(), DType::kF4E2M1),
                 Tensor::empty(Shape{n, k / 32}, DType::kUE8M0), 32};
  const float* src = w.data<float>();
  auto* packed = q.data.data<std::uint8_t>();
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t b = 0; b < k / 32; ++b) {
      float amax = 1e-12f;
      for (std::int64_t c = b * 32; c < (b + 1) * 32; ++c) amax = std::max(amax, std::fabs(src[r * k + c]));
      const std::uint8_t code = ue8m0_ceil_code(amax / kE2M1Max);
      q.scale.data<std::uint8_t>()[r * (k / 32) + b] = code;
      const float s = ue8m0_to_f32(code);
      for (std::int64_t c = b * 32; c < (b + 1) * 32; c += 2)
        packed[(r * k + c) / 2] = fp4_pack(f32_to_e2m1(src[r * k + c] / s), f32_to_e2m1(src[r * k + c + 1] / s));
    }
  return q;
}

// The f32 values a quantised weight stands for.
inline Tensor dequantize(const LinearWeight& q) {
  const std::int64_t n = q.data.dim(0), k = q.data.dim(1);
  Tensor out = Tensor::empty(Shape{n, k}, DType::kF32);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < k; ++c) {
      const float v = q.data.item_f32(r * k + c);
      float s = 1.0f;
      if (q.format == WeightFormat::kFp8Block) s = q.scale.item_f32((r / q.block) * q.scale.dim(1) + c / q.block);
      if (q.format == WeightFormat::kFp4) s = q.scale.item_f32(r * q.scale.dim(1) + c / q.block);
      out.data<float>()[r * k + c] = v * s;
    }
  return out;
}

}  // namespace deepinfer::ops::test
