// Row-wise views of host tensors for the CPU kernels: a tensor seen as rows of `width` f32 or
// bf16 elements at a fixed stride, with loads/stores that convert to and from f32, and the
// logical-row resolution of a RowView (optional page table).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "ops/op_types.h"
#include "tensor/float_formats.h"
#include "tensor/tensor.h"

namespace deepinfer::ops::cpu {

// rows × width elements of one float dtype; row r starts at base + r * row_stride elements.
struct Rows {
  std::uint8_t* base = nullptr;
  std::int64_t rows = 0;
  std::int64_t width = 0;
  std::int64_t row_stride = 0;  // in elements
  DType dtype = DType::kF32;

  std::size_t elem_bytes() const { return dtype == DType::kF32 ? 4 : 2; }
  std::uint8_t* row_ptr(std::int64_t r) const {
    return base + static_cast<std::size_t>(r * row_stride) * elem_bytes();
  }
  bool is_f32() const { return dtype == DType::kF32; }
};

// Views `t` as rows of `width` elements. The dims after the first must be contiguous; dim 0 may be
// strided when width covers all of them, otherwise the whole tensor must be contiguous.
Rows as_rows(const Tensor& t, std::int64_t width);
// Same, with width = the last dimension.
inline Rows as_rows(const Tensor& t) { return as_rows(t, t.ndim() == 0 ? 1 : t.dim(-1)); }

// Row r as f32: a pointer into the tensor for f32, else converted into `scratch` (width floats).
inline const float* load_row(const Rows& m, std::int64_t r, float* scratch) {
  const std::uint8_t* p = m.row_ptr(r);
  if (m.is_f32()) return reinterpret_cast<const float*>(p);
  const auto* h = reinterpret_cast<const std::uint16_t*>(p);
  for (std::int64_t i = 0; i < m.width; ++i) scratch[i] = bf16_to_f32(h[i]);
  return scratch;
}

// Row r converted into `buf` (always a copy; for in-place row transforms).
inline float* load_row_into(const Rows& m, std::int64_t r, float* buf) {
  const float* src = load_row(m, r, buf);
  if (src != buf) std::memcpy(buf, src, static_cast<std::size_t>(m.width) * 4);
  return buf;
}

// Writes `src` (width floats) to row r, rounding to bf16 when the tensor is bf16.
inline void store_row(const Rows& m, std::int64_t r, const float* src) {
  std::uint8_t* p = m.row_ptr(r);
  if (m.is_f32()) {
    std::memcpy(p, src, static_cast<std::size_t>(m.width) * 4);
    return;
  }
  auto* h = reinterpret_cast<std::uint16_t*>(p);
  for (std::int64_t i = 0; i < m.width; ++i) h[i] = f32_to_bf16(src[i]);
}

// A value rounded to what a tensor of `dtype` would hold.
inline float round_to(DType dtype, float v) { return dtype == DType::kBF16 ? round_to_bf16(v) : v; }

// Logical-row resolution of a RowView on the host.
struct RowSource {
  Rows rows;
  const std::int32_t* page_table = nullptr;
  std::int64_t page_rows = 0;
  std::int64_t num_rows = 0;

  std::int64_t physical(std::int64_t r) const {
    if (page_table == nullptr) return r;
    return static_cast<std::int64_t>(page_table[r / page_rows]) * page_rows + r % page_rows;
  }
  const std::uint8_t* row_ptr(std::int64_t r) const { return rows.row_ptr(physical(r)); }
};

RowSource as_source(const RowView& view);

// Whether `work` multiply-adds (or element visits) are worth waking the thread team: below this
// the fork/join costs more than it saves, and on a loaded machine each barrier can wait for a
// descheduled thread.
inline bool worth_threads(std::int64_t work) { return work >= (std::int64_t{1} << 18); }

// A per-thread grow-only f32 buffer (no allocation once warm). Slots 0-2 are for work inside a
// parallel region, 3 for linear_rows' activations, 4-7 for ops that call linear_rows.
float* scratch(int slot, std::size_t count);

}  // namespace deepinfer::ops::cpu
