// Internal to deepseek_v41/: what the layers of one V4.1 forward pass hand to each other (index
// lists published by index sources, the candidate source's block mask, the bounded-replay tail
// layout) and the per-part entry points of model.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek_v4/forward_context.h"
#include "model/deepseek_v41/weights.h"
#include "model/engram/engram_hash.h"

namespace deepinfer::model::v41 {

struct Csa2Shared {
  explicit Csa2Shared(std::size_t layers) : lists(layers) {}
  // Index lists [T, window + top-k] of each index-source layer (step lifetime).
  std::vector<Tensor> lists;
  // The candidate source's mask: f32 [rows, entries], 0 inside kept blocks, -inf outside; in the
  // replayed tail's row layout when the candidate source ran on it.
  Tensor candidate_bias;
  bool candidate_from_tail = false;
  // Bounded replay: the tail step the late layers run (null: no truncation this step), the layer
  // after which it starts, and the split layer's list laid out for the tail.
  const v4::Step* tail = nullptr;
  int split_layer = -1;
  Tensor tail_list;
};

// One CSA2 / SWA attention sub-layer (MODEL_SPEC B4.2-B4.4). `tail` says the step holds the
// replayed tails of a split step (layers after Csa2Shared::split_layer).
void attention_forward(v4::ForwardContext& cx, const io::LayerSpec& spec, const LayerWeights& w, const v4::Step& step,
                       bool tail, Csa2Shared& shared, const Tensor& u, Tensor& out);

// The Engram table rows of one Engram layer for a step, dequantised to f32 on the host (the tables
// stay in host memory): out[t, c·dim + i] for row t and hash column c, as f32 bit patterns (the
// step's Engram rows go to the device in one staged upload). ids: the step's host token ids.
void gather_engram_rows(const EngramWeights& w, int engram_index, const engram::EngramHasher& hasher,
                        const v4::Step& step, std::span<const std::int32_t> ids, std::int64_t head_dim,
                        std::span<std::int32_t> out);
// The Engram read before block `spec.index` (MODEL_SPEC B4.7): adds the gated n-gram memory
// value to every copy of `stream` [T, n, D]. rows: f32 [T, columns · head_dim] on the device.
void engram_forward(v4::ForwardContext& cx, const EngramWeights& w, const Tensor& rows, Tensor& stream);

}  // namespace deepinfer::model::v41
