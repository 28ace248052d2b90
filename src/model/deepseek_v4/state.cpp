// Contiguous row stores: grow by doubling, copying the rows written so far.
#include "model/deepseek_v4/state.h"

#include <algorithm>

namespace deepinfer::model::v4 {

ContiguousRowStore::ContiguousRowStore(ops::Backend& backend, std::int64_t width, DType dtype)
    : backend_(backend), width_(width), dtype_(dtype) {
  reserve(16);
}

void ContiguousRowStore::reserve(std::int64_t rows) {
  if (rows <= capacity_) return;
  const std::int64_t capacity = std::max(rows, 2 * capacity_);
  Tensor grown = backend_.empty(Shape{capacity, width_}, dtype_);
  if (capacity_ > 0) {
    Tensor head = grown.narrow(0, 0, capacity_);
    backend_.copy(rows_, head);
  }
  rows_ = std::move(grown);
  capacity_ = capacity;
}

ops::RowView ContiguousRowStore::view() const {
  return ops::RowView::contiguous(rows_);
}

}  // namespace deepinfer::model::v4
