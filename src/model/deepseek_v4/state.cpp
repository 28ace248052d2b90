// Fresh sequence state and contiguous row stores (grow by doubling, copying the rows written so far).
#include "model/deepseek_v4/state.h"

#include <algorithm>
#include <cmath>

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

namespace {

ops::CompressorState fresh_compressor(ops::Backend& be, int ratio, bool overlap, std::int64_t d) {
  const std::int64_t coff = overlap ? 2 : 1;
  ops::CompressorState s{be.empty(Shape{coff * ratio, coff * d}, DType::kF32),
                         be.empty(Shape{coff * ratio, coff * d}, DType::kF32), ratio, overlap};
  be.fill(s.kv, 0.0f);
  be.fill(s.score, -INFINITY);
  return s;
}

}  // namespace

std::unique_ptr<SequenceState> new_sequence_state(const io::ModelConfig& c, DType act, ops::Backend& backend) {
  auto s = std::make_unique<SequenceState>();
  const bool v4 = c.arch == io::ModelArch::kDeepseekV4;
  for (const io::LayerSpec& spec : c.layers) {
    LayerState ls;
    ls.ring = backend.empty(Shape{c.sliding_window, c.head_dim}, act);
    if (spec.owns_compressor) {
      // V4 CSA pools overlapping windows; a V4.1 ratio-1 source emits every token (no partial group).
      if (spec.compress_ratio > 1) ls.compressor = fresh_compressor(backend, spec.compress_ratio, v4 && spec.has_indexer, c.head_dim);
      ls.kv_rows = std::make_unique<ContiguousRowStore>(backend, c.head_dim, act);
    }
    if (spec.owns_index_keys) {
      if (v4) ls.index_compressor = fresh_compressor(backend, spec.compress_ratio, true, c.index_head_dim);
      ls.index_rows = std::make_unique<ContiguousRowStore>(backend, c.index_head_dim, act);
    }
    s->layers.push_back(std::move(ls));
  }
  return s;
}

}  // namespace deepinfer::model::v4
