// CPU backend: construction, memory movement and the simple row-wise ops (embedding, gathers,
// elementwise, RMSNorm, RoPE, SwiGLU, argmax).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "common/env.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/rows.h"

namespace deepinfer::ops::cpu {
namespace {

const std::int32_t* i32_data(const Tensor& t, const char* what) {
  DI_CHECK(t.dtype() == DType::kI32 && t.device().is_cpu() && t.is_contiguous(),
           "{}: expected a contiguous host i32 tensor, got {} {}", what, dtype_name(t.dtype()), t.shape());
  return t.data<std::int32_t>();
}

// out = fn(a, b) elementwise, computed in f32 row by row.
template <typename Fn>
void binary_rows(const Tensor& a, const Tensor& b, Tensor& out, const char* op, Fn fn) {
  DI_CHECK(a.numel() == b.numel() && a.numel() == out.numel(), "{}: {} and {} into {}", op, a.shape(), b.shape(),
           out.shape());
  const Rows ra = as_rows(a);
  const Rows rb = as_rows(b, ra.width);
  const Rows ro = as_rows(out, ra.width);
#pragma omp parallel for schedule(static) if (worth_threads(ra.rows * ra.width))
  for (std::int64_t r = 0; r < ra.rows; ++r) {
    float* buf = load_row_into(ra, r, scratch(0, ra.width));
    const float* y = load_row(rb, r, scratch(1, ra.width));
    for (std::int64_t i = 0; i < ra.width; ++i) buf[i] = fn(buf[i], y[i]);
    store_row(ro, r, buf);
  }
}

}  // namespace

CpuBackend::CpuBackend(int num_threads) {
  const int threads = num_threads > 0 ? num_threads : env::flags().num_threads;
  if (threads > 0) omp_set_num_threads(threads);
}

Tensor CpuBackend::empty(const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype); }

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  DI_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copy: {} {} into {} {}", src.shape(),
           dtype_name(src.dtype()), dst.shape(), dtype_name(dst.dtype()));
  if (src.numel() == 0) return;
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  // Rows strided along dim 0, contiguous inside.
  const std::int64_t rows = src.dim(0);
  const std::size_t row_bytes = dtype_bytes(src.dtype(), src.numel() / rows);
  const std::size_t elem = dtype_bytes(src.dtype(), 1);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<std::uint8_t*>(dst.raw_data()) + static_cast<std::size_t>(r * dst.stride(0)) * elem,
                static_cast<const std::uint8_t*>(src.raw_data()) + static_cast<std::size_t>(r * src.stride(0)) * elem,
                row_bytes);
  }
}

void CpuBackend::fill(Tensor& dst, float value) {
  const Rows m = as_rows(dst);
  float* buf = scratch(0, static_cast<std::size_t>(m.width));
  std::fill(buf, buf + m.width, value);
  for (std::int64_t r = 0; r < m.rows; ++r) store_row(m, r, buf);
}

void CpuBackend::convert(const Tensor& src, Tensor& dst) {
  DI_CHECK(src.numel() == dst.numel(), "convert: {} into {}", src.shape(), dst.shape());
  const Rows s = as_rows(src);
  const Rows d = as_rows(dst, s.width);
#pragma omp parallel for schedule(static) if (worth_threads(s.rows * s.width))
  for (std::int64_t r = 0; r < s.rows; ++r) store_row(d, r, load_row(s, r, scratch(0, s.width)));
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const std::int32_t* id = i32_data(ids, "embedding ids");
  const Rows tab = as_rows(table);
  const std::int64_t t_count = ids.numel();
  const Rows o = as_rows(out, tab.width);
  DI_CHECK(o.rows % std::max<std::int64_t>(t_count, 1) == 0, "embedding: out {} for {} ids", out.shape(), t_count);
  const std::int64_t copies = t_count == 0 ? 0 : o.rows / t_count;
  for (std::int64_t t = 0; t < t_count; ++t)
    DI_CHECK(id[t] >= 0 && id[t] < tab.rows, "embedding: token id {} outside the table of {} rows", id[t], tab.rows);
#pragma omp parallel for schedule(static) if (worth_threads(t_count * copies * tab.width))
  for (std::int64_t t = 0; t < t_count; ++t) {
    const float* row = load_row(tab, id[t], scratch(0, tab.width));
    for (std::int64_t c = 0; c < copies; ++c) store_row(o, t * copies + c, row);
  }
}

void CpuBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  const std::int32_t* idx = i32_data(rows, "gather_rows rows");
  const Rows s = as_rows(src, src.numel() / std::max<std::int64_t>(src.dim(0), 1));
  const Rows o = as_rows(out, s.width);
  DI_CHECK(o.rows == rows.numel(), "gather_rows: out {} for {} rows", out.shape(), rows.numel());
  for (std::int64_t i = 0; i < o.rows; ++i) {
    DI_CHECK(idx[i] >= 0 && idx[i] < s.rows, "gather_rows: row {} out of range [0, {})", idx[i], s.rows);
    store_row(o, i, load_row(s, idx[i], scratch(0, s.width)));
  }
}

void CpuBackend::scatter_rows(const Tensor& src, const RowView& dst, const Tensor& rows) {
  const std::int32_t* idx = i32_data(rows, "scatter_rows rows");
  const RowSource d = as_source(dst);
  const Rows s = as_rows(src, d.rows.width);
  DI_CHECK(s.rows == rows.numel(), "scatter_rows: {} source rows for {} destinations", s.rows, rows.numel());
  for (std::int64_t i = 0; i < s.rows; ++i) {
    if (idx[i] == -1) continue;  // a row that writes nowhere (batch padding, no completed group)
    DI_CHECK(idx[i] >= 0 && idx[i] < d.num_rows, "scatter_rows: row {} out of range [0, {})", idx[i], d.num_rows);
    store_row(d.rows, d.physical(idx[i]), load_row(s, i, scratch(0, s.width)));
  }
}

void CpuBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  binary_rows(a, b, out, "add", [](float x, float y) { return x + y; });
}

void CpuBackend::scale(const Tensor& a, float s, Tensor& out) {
  DI_CHECK(a.numel() == out.numel(), "scale: {} into {}", a.shape(), out.shape());
  const Rows ra = as_rows(a);
  const Rows ro = as_rows(out, ra.width);
#pragma omp parallel for schedule(static) if (worth_threads(ra.rows * ra.width))
  for (std::int64_t r = 0; r < ra.rows; ++r) {
    float* buf = load_row_into(ra, r, scratch(0, ra.width));
    for (std::int64_t i = 0; i < ra.width; ++i) buf[i] *= s;
    store_row(ro, r, buf);
  }
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  const Rows rx = as_rows(x);
  const Rows ro = as_rows(out, rx.width);
  DI_CHECK(ro.rows == rx.rows, "rms_norm: {} into {}", x.shape(), out.shape());
  Rows rw;
  if (weight != nullptr) {
    rw = as_rows(*weight);
    DI_CHECK(rw.width == rx.width && rw.rows == 1, "rms_norm: weight {} for rows of {}", weight->shape(), rx.width);
  }
#pragma omp parallel for schedule(static) if (worth_threads(rx.rows * rx.width))
  for (std::int64_t r = 0; r < rx.rows; ++r) {
    float* buf = load_row_into(rx, r, scratch(0, rx.width));
    const float mean = dot_f32(buf, buf, rx.width) / static_cast<float>(rx.width);
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (std::int64_t i = 0; i < rx.width; ++i) buf[i] *= inv;
    if (weight != nullptr) {
      const float* w = load_row(rw, 0, scratch(1, rx.width));
      for (std::int64_t i = 0; i < rx.width; ++i) buf[i] = w[i] * buf[i];
    }
    store_row(ro, r, buf);
  }
}

void CpuBackend::rope(Tensor& x, const Tensor& positions, const RopeTable& table, bool inverse) {
  const std::int32_t* pos = i32_data(positions, "rope positions");
  const std::int64_t t_count = positions.numel();
  const int rd = table.rope_dim;
  DI_CHECK(rd > 0 && rd % 2 == 0 && table.inv_freq.numel() == rd / 2 && table.inv_freq.dtype() == DType::kF32,
           "rope: table for rope_dim {} has {} frequencies", rd, table.inv_freq.numel());
  const std::int64_t d = x.dim(-1);
  DI_CHECK(d >= rd && x.numel() % std::max<std::int64_t>(t_count * d, 1) == 0,
           "rope: x {} does not hold {} positions of rows of {}", x.shape(), t_count, d);
  const Rows m = as_rows(x, d);
  const std::int64_t heads = t_count == 0 ? 0 : m.rows / t_count;
  const float* inv_freq = table.inv_freq.data<float>();
#pragma omp parallel for schedule(static) if (worth_threads(m.rows * m.width))
  for (std::int64_t t = 0; t < t_count; ++t) {
    float* cs = scratch(1, static_cast<std::size_t>(rd));
    for (int i = 0; i < rd / 2; ++i) {
      const float angle = static_cast<float>(pos[t]) * inv_freq[i];
      cs[2 * i] = std::cos(angle);
      cs[2 * i + 1] = inverse ? -std::sin(angle) : std::sin(angle);
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t r = t * heads + h;
      float* buf = load_row_into(m, r, scratch(0, d));
      float* tail = buf + (d - rd);
      for (int i = 0; i < rd / 2; ++i) {
        const float x0 = tail[2 * i];
        const float x1 = tail[2 * i + 1];
        tail[2 * i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
        tail[2 * i + 1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
      }
      store_row(m, r, buf);
    }
  }
}

void CpuBackend::swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) {
  binary_rows(gate, up, out, "swiglu", [limit](float g, float u) {
    if (limit > 0.0f) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    return g / (1.0f + std::exp(-g)) * u;
  });
}

void CpuBackend::argmax(const Tensor& logits, Tensor& out) {
  const Rows m = as_rows(logits);
  DI_CHECK(out.dtype() == DType::kI32 && out.numel() == m.rows, "argmax: out {} for {} rows", out.shape(), m.rows);
  auto* o = out.data<std::int32_t>();
#pragma omp parallel for schedule(static) if (worth_threads(m.rows * m.width))
  for (std::int64_t r = 0; r < m.rows; ++r) {
    const float* v = load_row(m, r, scratch(0, m.width));
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < m.width; ++i)
      if (v[i] > v[best]) best = i;
    o[r] = static_cast<std::int32_t>(best);
  }
}

}  // namespace deepinfer::ops::cpu

namespace deepinfer::ops {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace deepinfer::ops
