// Quantise→dequantise and Hadamard on f32 spans, plus the in-place ops built on them.
#include "ops/cpu/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/rows.h"
#include "tensor/float_formats.h"

namespace deepinfer::ops::cpu {
namespace {

float block_amax(const float* v, std::int64_t n) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax;
}

}  // namespace

void fake_quant_fp8_span(float* v, std::int64_t n, int block) {
  constexpr float kInv448 = 1.0f / kE4M3Max;
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min<std::int64_t>(block, n - b0);
    float* x = v + b0;
    const float amax = std::max(block_amax(x, len), 1e-4f);
    const float s = pow2_ceil(amax * kInv448);
    for (std::int64_t i = 0; i < len; ++i) {
      const float q = std::clamp(x[i] / s, -kE4M3Max, kE4M3Max);
      x[i] = round_to_e4m3(q) * s;
    }
  }
}

void fake_quant_fp4_span(float* v, std::int64_t n, int block, Fp4ScaleKind scale_kind) {
  constexpr float kInv6 = 1.0f / kE2M1Max;
  for (std::int64_t b0 = 0; b0 < n; b0 += block) {
    const std::int64_t len = std::min<std::int64_t>(block, n - b0);
    float* x = v + b0;
    float amax = block_amax(x, len);
    float s;
    if (scale_kind == Fp4ScaleKind::kUE8M0) {
      amax = std::max(amax, 6.0f * std::ldexp(1.0f, -126));
      s = pow2_ceil(amax * kInv6);
    } else {
      amax = std::max(amax, 6.0f * std::ldexp(1.0f, -9));
      s = round_to_e4m3(amax / kE2M1Max);
    }
    for (std::int64_t i = 0; i < len; ++i) {
      const float q = std::clamp(x[i] / s, -kE2M1Max, kE2M1Max);
      x[i] = e2m1_to_f32(f32_to_e2m1(q)) * s;
    }
  }
}

void hadamard_span(float* v, std::int64_t n) {
  for (std::int64_t h = 1; h < n; h *= 2) {
    for (std::int64_t i = 0; i < n; i += 2 * h) {
      for (std::int64_t j = i; j < i + h; ++j) {
        const float a = v[j];
        const float b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] *= scale;
}

void CpuBackend::fake_quant_fp8(Tensor& x, std::int64_t col_begin, std::int64_t col_end, int block) {
  const Rows m = as_rows(x);
  DI_CHECK(0 <= col_begin && col_begin <= col_end && col_end <= m.width && block > 0,
           "fake_quant_fp8: columns [{}, {}) / block {} invalid for width {}", col_begin, col_end, block, m.width);
#pragma omp parallel for schedule(static) if (worth_threads(m.rows * m.width * 4))
  for (std::int64_t r = 0; r < m.rows; ++r) {
    float* buf = scratch(0, static_cast<std::size_t>(m.width));
    load_row_into(m, r, buf);
    fake_quant_fp8_span(buf + col_begin, col_end - col_begin, block);
    store_row(m, r, buf);
  }
}

void CpuBackend::fake_quant_fp4(Tensor& x, int block, Fp4ScaleKind scale_kind) {
  const Rows m = as_rows(x);
  DI_CHECK(block > 0, "fake_quant_fp4: block {} must be positive", block);
#pragma omp parallel for schedule(static) if (worth_threads(m.rows * m.width * 4))
  for (std::int64_t r = 0; r < m.rows; ++r) {
    float* buf = scratch(0, static_cast<std::size_t>(m.width));
    load_row_into(m, r, buf);
    fake_quant_fp4_span(buf, m.width, block, scale_kind);
    store_row(m, r, buf);
  }
}

void CpuBackend::hadamard(Tensor& x) {
  const Rows m = as_rows(x);
  DI_CHECK(m.width > 0 && std::has_single_bit(static_cast<std::uint64_t>(m.width)),
           "hadamard: row length {} is not a power of two", m.width);
#pragma omp parallel for schedule(static) if (worth_threads(m.rows * m.width * 4))
  for (std::int64_t r = 0; r < m.rows; ++r) {
    float* buf = scratch(0, static_cast<std::size_t>(m.width));
    load_row_into(m, r, buf);
    hadamard_span(buf, m.width);
    store_row(m, r, buf);
  }
}

}  // namespace deepinfer::ops::cpu
