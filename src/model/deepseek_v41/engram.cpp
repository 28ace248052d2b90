// The V4.1 Engram read-out (MODEL_SPEC B4.7): row ids from the hasher (host, from token ids and
// each sequence's recent history), the table rows gathered and dequantised on the host (the
// tables stay in host memory) before the step's layers run, then wkv on the backend and the
// per-copy gate op.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "model/deepseek_v41/csa2.h"
#include "tensor/float_formats.h"

namespace deepinfer::model::v41 {
namespace {

// One table row dequantised to f32: FP8 values times their block's E8M0 (or f32) scale, or a
// float row as stored.
void dequant_row(const EngramWeights& w, std::int64_t row, std::int64_t dim, float* out) {
  const Tensor& t = w.table;
  if (t.dtype() == DType::kF8E4M3) {
    const auto* codes = static_cast<const std::uint8_t*>(t.raw_data()) + row * dim;
    const std::int64_t blocks = dim / 32;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const float scale = w.table_scale.dtype() == DType::kUE8M0
                              ? ue8m0_to_f32(static_cast<const std::uint8_t*>(w.table_scale.raw_data())[row * blocks + b])
                              : w.table_scale.data<float>()[row * blocks + b];
      for (std::int64_t i = b * 32; i < (b + 1) * 32; ++i) out[i] = e4m3_to_f32(codes[i]) * scale;
    }
  } else if (t.dtype() == DType::kBF16) {
    const auto* bits = static_cast<const std::uint16_t*>(t.raw_data()) + row * dim;
    for (std::int64_t i = 0; i < dim; ++i) out[i] = bf16_to_f32(bits[i]);
  } else {
    std::copy_n(t.data<float>() + row * dim, dim, out);
  }
}

}  // namespace

void gather_engram_rows(const EngramWeights& w, int engram_index, const engram::EngramHasher& hasher,
                        const v4::Step& step, std::span<const std::int32_t> ids, std::int64_t head_dim,
                        std::span<std::int32_t> out) {
  const std::int64_t t = step.tokens, cols = hasher.columns();
  DI_CHECK(static_cast<std::int64_t>(out.size()) == t * cols * head_dim, "engram rows: {} values for {} x {} x {}",
           out.size(), t, cols, head_dim);
  std::vector<std::int32_t> row_ids(static_cast<std::size_t>(t * cols));
  for (const v4::Segment& seg : step.segments) {
    const std::span<std::int32_t> seg_ids(row_ids.data() + seg.offset * cols, static_cast<std::size_t>(seg.count * cols));
    hasher.row_ids(engram_index, seg.state->recent_tokens, seg.start_pos,
                   ids.subspan(static_cast<std::size_t>(seg.offset), static_cast<std::size_t>(seg.count)), seg_ids);
  }
  std::vector<float> values(static_cast<std::size_t>(head_dim));
  for (std::int64_t i = 0; i < t * cols; ++i) {
    const std::int32_t row = row_ids[static_cast<std::size_t>(i)];
    DI_CHECK(row >= 0 && row < w.table.dim(0), "engram layer {}: row id {} outside the table ({} rows)",
             hasher.layer_id(engram_index), row, w.table.dim(0));
    dequant_row(w, row, head_dim, values.data());
    std::memcpy(out.data() + i * head_dim, values.data(), values.size() * sizeof(float));
  }
}

void engram_forward(v4::ForwardContext& cx, const EngramWeights& w, const Tensor& rows, Tensor& stream) {
  const io::ModelConfig& c = cx.config;
  const std::int64_t t = rows.dim(0), width = rows.dim(1);
  const std::int64_t n = c.hc_mult, D = c.hidden_size;
  ops::Backend& be = cx.backend;
  Tensor e = rows;
  if (cx.numerics.act != DType::kF32) {
    e = cx.act(Shape{t, width});
    be.convert(rows, e);  // exact: FP8 × 2^k values fit bf16
  }
  Tensor kv = cx.act(Shape{t, (n + 1) * D});
  be.linear(e, w.wkv, cx.linear_options(w.wkv), kv);
  // kv = [key of copy 0 … copy n-1 | value].
  be.engram_gate(stream, kv.narrow(1, 0, n * D), kv.narrow(1, n * D, D), w.omega, cx.eps(), stream);
}

}  // namespace deepinfer::model::v41
