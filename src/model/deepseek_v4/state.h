// Per-sequence V4 / V4.1 state (MODEL_SPEC A5, B5): per layer the sliding-window ring, the compressors'
// partial groups and the growing row stores (compressed KV, indexer keys). Row stores are reached
// through RowStore, so the same forward pass runs on contiguous test memory or on the engine's
// pages (a RowView with a page table).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "io/model_config.h"
#include "ops/backend.h"

namespace deepinfer::model::v4 {

// The rows of one growing store of one sequence; row j covers tokens [j·ratio, (j+1)·ratio).
class RowStore {
 public:
  virtual ~RowStore() = default;
  // Makes logical rows [0, rows) addressable (a contiguous store grows; a paged one checks its pages).
  virtual void reserve(std::int64_t rows) = 0;
  // The addressable rows.
  virtual ops::RowView view() const = 0;
};

// Backend memory that doubles when it runs out (tests, the CLI, single-sequence use).
class ContiguousRowStore final : public RowStore {
 public:
  ContiguousRowStore(ops::Backend& backend, std::int64_t width, DType dtype);
  void reserve(std::int64_t rows) override;
  ops::RowView view() const override;

 private:
  ops::Backend& backend_;
  std::int64_t width_;
  DType dtype_;
  Tensor rows_;  // [capacity, width]
  std::int64_t capacity_ = 0;
};

struct LayerState {
  Tensor ring;  // [window, head_dim]: slot p mod window holds position p's K=V row
  std::optional<ops::CompressorState> compressor;        // compressed layers
  std::optional<ops::CompressorState> index_compressor;  // CSA layers
  std::unique_ptr<RowStore> kv_rows;     // compressed KV, [*, head_dim]
  std::unique_ptr<RowStore> index_rows;  // indexer keys, [*, index_head_dim]
};

struct SequenceState {
  std::int64_t num_tokens = 0;  // tokens absorbed so far = position of the next token
  std::vector<LayerState> layers;
  // V4.1 Engram: the last (max_ngram_size - 1) token ids before position num_tokens, oldest
  // first (fewer at the start of a sequence). Host memory: hashing runs on the host.
  std::vector<std::int32_t> recent_tokens;
};

// The empty state (position 0) of a V4 or V4.1 sequence in contiguous backend memory: per layer a
// window ring; compressors with a partial group where groups span tokens (V4 ratios 4 / 128, V4.1
// ratio 2; the V4 CSA indexer's own compressor too); row stores for owned compressed KV and index keys.
std::unique_ptr<SequenceState> new_sequence_state(const io::ModelConfig& config, DType act, ops::Backend& backend);

}  // namespace deepinfer::model::v4
