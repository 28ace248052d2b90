// Helpers for the CUDA-vs-CPU op-parity suite (llama.cpp test-backend-ops style): one CUDA
// backend per test binary, host<->device copies, relative-error checks that also reject NaN and
// unwritten outputs (outputs are poisoned with NaN before each GPU op).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "ops/cuda/cuda_backend.h"
#include "ops/op_test_util.h"
#include "support/gpu_test.h"

namespace deepinfer::ops::test {

// Relative-error bounds by what the GPU path rounds: f32 arithmetic (reduction order only),
// bf16 operands or outputs.
inline constexpr double kTolF32 = 1e-5;
inline constexpr double kTolBf16 = 1e-2;

inline Backend& gpu() {
  static std::unique_ptr<Backend> backend = make_cuda_backend(0);
  return *backend;
}

inline Backend& gpu_invariant() {
  static std::unique_ptr<Backend> backend = [] {
    CudaBackendOptions options;
    options.batch_invariant = true;
    return make_cuda_backend(options);
  }();
  return *backend;
}

inline Tensor to_gpu(const Tensor& host, Backend& b = gpu()) { return b.upload(host); }

inline Tensor to_host(const Tensor& device, Backend& b = gpu()) {
  Tensor h = Tensor::empty(device.shape(), device.dtype());
  b.copy(device, h);
  b.synchronize();
  return h;
}

// A device tensor of the given shape filled with NaN, so unwritten outputs fail the comparison.
inline Tensor poisoned(const Shape& shape, DType dtype, Backend& b = gpu()) {
  Tensor t = b.empty(shape, dtype);
  if (dtype == DType::kF32 || dtype == DType::kBF16) b.fill(t, std::numeric_limits<float>::quiet_NaN());
  return t;
}

inline LinearWeight to_gpu(const LinearWeight& w, Backend& b = gpu()) {
  LinearWeight d = w;
  d.data = b.upload(w.data);
  if (w.scale.defined() && w.scale.numel() > 0) d.scale = b.upload(w.scale);
  return d;
}

inline RowView to_gpu(const RowView& v, Backend& b = gpu()) {
  RowView d = v;
  d.pool = b.upload(v.pool);
  if (v.page_table.defined() && v.page_table.numel() > 0) d.page_table = b.upload(v.page_table);
  return d;
}

// ‖got − want‖₂ / ‖want‖₂ over host tensors; NaN anywhere in got fails.
inline double rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = values(got), w = values(want);
  EXPECT_EQ(g.size(), w.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < g.size() && i < w.size(); ++i) {
    if (std::isnan(g[i]) && !std::isnan(w[i])) return std::numeric_limits<double>::infinity();
    const double diff = static_cast<double>(g[i]) - w[i];
    num += diff * diff;
    den += static_cast<double>(w[i]) * w[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

// Compares a device result with the CPU reference.
inline void expect_parity(const Tensor& device_result, const Tensor& cpu_result, double tol, Backend& b = gpu()) {
  const Tensor got = to_host(device_result, b);
  const double err = rel_error(got, cpu_result);
  EXPECT_LE(err, tol) << "relative error " << err << " over " << fmt::format("{}", cpu_result.shape());
}

inline void expect_i32_equal(const Tensor& device_result, const Tensor& cpu_result, Backend& b = gpu()) {
  const Tensor got = to_host(device_result, b);
  ASSERT_EQ(got.numel(), cpu_result.numel());
  for (std::int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.data<std::int32_t>()[i], cpu_result.data<std::int32_t>()[i]) << "element " << i;
}

inline Tensor random_i32(const Shape& shape, std::uint32_t seed, std::int32_t lo, std::int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(lo, hi);
  std::vector<std::int32_t> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return i32_tensor(shape, v);
}

}  // namespace deepinfer::ops::test
