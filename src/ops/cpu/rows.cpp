// Row views of host tensors and per-thread scratch buffers for the CPU kernels.
#include "ops/cpu/rows.h"

#include <array>

namespace deepinfer::ops::cpu {

Rows as_rows(const Tensor& t, std::int64_t width) {
  DI_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16, "cpu op: expected an f32 or bf16 tensor, got {}",
           dtype_name(t.dtype()));
  DI_CHECK(t.device().is_cpu(), "cpu op: tensor is not in host memory");
  DI_CHECK(width > 0, "cpu op: row width {} of tensor {} must be positive", width, t.shape());
  Rows m;
  m.base = static_cast<std::uint8_t*>(const_cast<void*>(t.raw_data()));
  m.dtype = t.dtype();
  m.width = width;
  if (t.ndim() <= 1) {
    DI_CHECK(t.numel() % width == 0, "cpu op: {} elements are not rows of {}", t.numel(), width);
    m.rows = t.numel() / width;
    m.row_stride = width;
    return m;
  }
  // Dims after the first must be contiguous among themselves.
  std::int64_t expected = 1;
  for (int i = t.ndim() - 1; i >= 1; --i) {
    DI_CHECK(t.dim(i) == 1 || t.stride(i) == expected, "cpu op: tensor {} has non-contiguous inner dims",
             t.shape());
    expected *= t.dim(i);
  }
  const std::int64_t inner = expected;
  if (width == inner) {
    m.rows = t.dim(0);
    m.row_stride = t.dim(0) == 1 ? inner : t.stride(0);
    return m;
  }
  DI_CHECK(inner % width == 0 && (t.dim(0) == 1 || t.stride(0) == inner),
           "cpu op: tensor {} cannot be viewed as rows of {}", t.shape(), width);
  m.rows = t.numel() / width;
  m.row_stride = width;
  return m;
}

RowSource as_source(const RowView& view) {
  RowSource s;
  s.rows = as_rows(view.pool, view.width());
  s.num_rows = view.num_rows;
  if (view.page_table.defined() && view.page_table.numel() > 0) {
    DI_CHECK(view.page_table.dtype() == DType::kI32 && view.page_rows > 0,
             "RowView: page table must be i32 with positive page_rows");
    s.page_table = view.page_table.data<std::int32_t>();
    s.page_rows = view.page_rows;
  } else {
    DI_CHECK(view.num_rows <= s.rows.rows, "RowView: {} logical rows exceed the {} rows of its pool",
             view.num_rows, s.rows.rows);
  }
  return s;
}

float* scratch(int slot, std::size_t count) {
  thread_local std::array<std::vector<float>, 8> buffers;
  auto& buf = buffers.at(static_cast<std::size_t>(slot));
  if (buf.size() < count) buf.resize(count);
  return buf.data();
}

}  // namespace deepinfer::ops::cpu
