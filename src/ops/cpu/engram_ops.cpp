// CPU Engram read-out gate (MODEL_SPEC B4.7): a per-copy scalar gate from the normalised
// stream·key similarity, then the value row added to each copy of the mHC stream.
#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {

void CpuBackend::engram_gate(const Tensor& x, const Tensor& key, const Tensor& value, const Tensor& omega, float eps,
                             Tensor& out) {
  DI_CHECK(x.ndim() == 3 && out.shape() == x.shape() && key.ndim() >= 2 && key.dim(0) == x.dim(0) &&
               key.numel() == x.numel(),
           "engram_gate: x {} / key {} / out {} must be [T, n, D]", x.shape(), key.shape(), out.shape());
  const std::int64_t tokens = x.dim(0), n = x.dim(1), d = x.dim(2);
  DI_CHECK(omega.dtype() == DType::kF32 && omega.shape() == Shape({n, d}) && omega.is_contiguous(),
           "engram_gate: omega {} {} must be f32 [{}, {}]", dtype_name(omega.dtype()), omega.shape(), n, d);
  const Rows rx = as_rows(x, n * d), rk = as_rows(key, n * d), rv = as_rows(value, d), ro = as_rows(out, n * d);
  DI_CHECK(rv.rows == tokens, "engram_gate: value {} for {} tokens", value.shape(), tokens);
  const float* om = omega.data<float>();
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
#pragma omp parallel for schedule(static) if (worth_threads(tokens * n * d * 4))
  for (std::int64_t t = 0; t < tokens; ++t) {
    float* o = load_row_into(rx, t, scratch(0, n * d));
    const float* k = load_row(rk, t, scratch(1, n * d));
    const float* v = load_row(rv, t, scratch(2, d));
    for (std::int64_t i = 0; i < n; ++i) {
      float* xi = o + i * d;
      const float* ki = k + i * d;
      const float* wi = om + i * d;
      float dot = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) dot += xi[c] * wi[c] * ki[c];
      const float rx_inv = 1.0f / std::sqrt(dot_f32(xi, xi, d) / static_cast<float>(d) + eps);
      const float rk_inv = 1.0f / std::sqrt(dot_f32(ki, ki, d) / static_cast<float>(d) + eps);
      const float s = dot * rx_inv * rk_inv * inv_sqrt_d;
      const float mag = std::sqrt(std::max(std::fabs(s), 1e-6f));
      const float signed_mag = s > 0.0f ? mag : s < 0.0f ? -mag : 0.0f;  // sign(0) = 0
      const float gate = 1.0f / (1.0f + std::exp(-signed_mag));
      for (std::int64_t c = 0; c < d; ++c) xi[c] = xi[c] + gate * v[c];
    }
    store_row(ro, t, o);
  }
}

}  // namespace deepinfer::ops::cpu
