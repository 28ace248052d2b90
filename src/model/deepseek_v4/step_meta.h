// The per-step metadata of the batched forward pass: everything a step's ops read that depends on
// which sequences are in the batch (ids, positions, state slots, ring and store rows, page tables,
// index lists, per-row key counts), laid out on the host in one i32 buffer and uploaded with one
// copy, so no op waits on the host and each op runs once for the whole batch. Attention sources
// of a batch of S segments (sequences) and T rows:
//   ring:       the layer's ring pool through page table = each segment's slot (page_rows = window):
//               segment i's ring row e is virtual row i·W + e;
//   kv:         this step's K=V rows, virtual rows S·W + t;
//   compressed: the layer's store pool through the segment-major page table [S, max_pages]:
//               segment i's entry e is virtual row S·W + T + i·max_pages·page_rows + e.
// Bucketed steps (decode batches for CUDA graphs) pad rows and segments to a bucket and pages to a
// power of two; padding rows write nowhere (-1) and see no keys.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v4/state.h"
#include "ops/backend.h"
#include "ops/graph.h"

namespace deepinfer::model::v4 {

// One sequence's rows inside the flattened batch: rows [offset, offset + count), positions
// start_pos, start_pos + 1, ...
struct Segment {
  SequenceState* state = nullptr;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::int64_t start_pos = 0;
  // Window positions below this are not attended (V4.1 bounded replay runs late layers on a
  // chunk's tail only; the rows before it were never computed there).
  std::int64_t window_floor = 0;
};

// The metadata of the rows of one compression ratio.
struct RatioMeta {
  int ratio = 0;
  std::int64_t entries = 0;    // score columns: at least the entries any row of the step sees
  std::int64_t page_rows = 0;  // store rows per page
  Tensor group_pos;   // i32 [T]: first position of the group the row completes (0 elsewhere)
  Tensor store_rows;  // i32 [T]: segment-major store row of that group, -1 elsewhere
  Tensor key_base;    // i32 [T]: segment-major store row of the row's entry 0
  Tensor num_keys;    // i32 [T]: entries visible at the row's position
  Tensor offsets;     // i32 [T]: virtual attention row of the row's entry 0
  Tensor topk_list;   // i32 [T, W + topk_width]: window part, then -1 for a top-k to fill (if used)
  Tensor all_list;    // i32 [T, W + entries]: window part, then every visible entry (if used)
  std::int64_t topk_width = 0;
};

struct StepMeta {
  std::int64_t rows = 0;       // T (padded)
  std::int64_t segments = 0;   // S (padded)
  std::int64_t max_pages = 0;  // page-table columns per segment
  Tensor ids;          // i32 [T]
  Tensor positions;    // i32 [T]
  Tensor slots;        // i32 [T]: the row's state slot, -1 for padding
  Tensor ring_rows;    // i32 [T]: physical ring-pool row the row's K=V enters (last window rows), else -1
  Tensor ring_table;   // i32 [S]: each segment's slot
  Tensor store_table;  // i32 [S · max_pages]
  Tensor window_list;  // i32 [T, W] (ratio-0 layers)
  Tensor logit_rows;   // i32 [R]
  Tensor extra;        // i32 caller rows (V4.1 replay: full-step row of each tail row)
  Tensor one_hot;      // f32 [T, StepRows::one_hot] (when asked for)
  std::vector<RatioMeta> ratios;

  const RatioMeta& ratio(int r) const;
  // The ring source / the compressed source over `store` (attention, indexer keys, stores).
  ops::RowView ring_view(const Tensor& ring_pool, std::int64_t window) const;
  ops::RowView store_view(const RowPool& store) const;
};

// The shapes of a step's metadata: shared by a split step's full and tail layouts.
struct StepShape {
  std::int64_t rows = 0;
  std::int64_t segments = 0;
  std::int64_t max_pages = 0;
  std::vector<std::pair<int, std::int64_t>> entries;  // (ratio, score columns)
};

// Host view of one step for the layout.
struct StepRows {
  std::span<const Segment> segments;
  std::span<const std::int32_t> ids, positions;  // real rows (padding follows)
  std::span<const std::int32_t> logit_rows;
  std::span<const std::int32_t> extra;
  // > 0: also lay out one-hot f32 rows [T, one_hot] (1 in column 0; V4.1's first lagged collapse).
  std::int64_t one_hot = 0;
};

// The smallest bucket (1, 2, 4, ..., 256, then multiples of 256) holding n.
std::int64_t batch_bucket(std::int64_t n);

// The device copy of a step's metadata: pinned host slots and one async upload (ops::StagingBuffer,
// no stream synchronisation), one buffer per power-of-two capacity so a bucket's steps always land
// at the same device address (what a captured graph reads).
class MetaStaging {
 public:
  explicit MetaStaging(ops::Backend& backend) : backend_(backend) {}
  // Enqueues the upload of `host` and returns its device view, i32 [host.size()].
  Tensor upload(std::span<const std::int32_t> host);
  // The host buffer the steps are laid out in, kept across steps (an 8K prompt's 32 MB would
  // otherwise be reallocated and page-faulted in on every step: 16.7 -> 2.8 ms, bench/step_meta_bench).
  std::vector<std::int32_t> take_host_buffer() { return std::move(host_buffer_); }
  void give_back_host_buffer(std::vector<std::int32_t> buffer) {
    buffer.clear();
    host_buffer_ = std::move(buffer);
  }

 private:
  ops::Backend& backend_;
  std::vector<std::int32_t> host_buffer_;
  std::map<std::size_t, std::unique_ptr<ops::StagingBuffer>> by_capacity_;  // capacity in i32 values
};

// Lays out the steps of one forward pass (the step, and the replayed tail of a split V4.1 step) in
// one host buffer; upload() copies it to the device once and returns each step's views.
class StepMetaBuilder {
 public:
  // Lays out in `staging`'s kept host buffer (returned to it by upload()).
  StepMetaBuilder(const io::ModelConfig& config, const StateArena& arena, MetaStaging& staging);

  // Shapes of `step`: exact, or (bucketed, decode steps only) padded to buckets.
  StepShape shape_of(const StepRows& step, bool bucketed) const;
  void add(const StepRows& step, const StepShape& shape);
  std::vector<StepMeta> upload(MetaStaging& staging);

 private:
  // A field of a pending step and where its values sit in the host buffer.
  struct View {
    int ratio = -1;  // >= 0: a field of ratios[ratio]
    Tensor StepMeta::*step_field = nullptr;
    Tensor RatioMeta::*ratio_field = nullptr;
    std::size_t offset = 0;
    Shape shape;
    DType dtype = DType::kI32;  // f32 fields hold their bit patterns
  };
  struct Pending {
    StepMeta meta;  // shapes filled; tensors assigned at upload
    std::vector<View> views;
  };
  // Appends a field filled with `fill`; returns its offset in the host buffer.
  std::size_t put(Pending& p, View view, std::int32_t fill);
  void window_lists(const StepRows& step, const StepMeta& m, std::int32_t* out, std::int64_t width) const;
  // The rows, counts and index lists of one compression ratio.
  void add_ratio(const StepRows& step, Pending& p, int ratio, std::int64_t entries);

  const io::ModelConfig& config_;
  const StateArena& arena_;
  std::vector<std::int32_t> host_;
  std::vector<Pending> pending_;
};

}  // namespace deepinfer::model::v4
