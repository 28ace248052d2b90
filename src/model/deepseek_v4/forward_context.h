// What one forward pass of the V4 model shares between its parts (internal to deepseek_v4/):
// the backend, scratch arenas, numerics, RoPE tables and the batch's flattened token layout.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"
#include "ops/backend.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {

// One sequence's tokens inside the flattened batch: rows [offset, offset + count), positions
// start_pos, start_pos + 1, ...
struct Segment {
  SequenceState* state = nullptr;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::int64_t start_pos = 0;
};

struct Step {
  std::vector<Segment> segments;
  std::int64_t tokens = 0;
  Tensor ids;        // i32 [tokens] on the device
  Tensor positions;  // i32 [tokens] on the device
};

struct ForwardContext {
  ops::Backend& backend;
  ops::Workspace& step_ws;   // lives for the whole pass
  ops::Workspace& layer_ws;  // scratch of one layer, released after it
  const io::ModelConfig& config;
  const Numerics& numerics;
  const ops::RopeTable& rope_main;      // ratio-0 layers
  const ops::RopeTable& rope_compress;  // compressed layers (YaRN)

  // Per-layer scratch.
  Tensor alloc(const Shape& shape, DType dtype) { return layer_ws.alloc(shape, dtype); }
  Tensor act(const Shape& shape) { return layer_ws.alloc(shape, numerics.act); }
  // A device copy of host indices in per-layer scratch.
  Tensor upload_i32(std::span<const std::int32_t> host, const Shape& shape);
  // Input fake-quant of a projection: only quantised weights take FP8 inputs (reference linear()).
  ops::LinearOptions linear_options(const ops::LinearWeight& w) const {
    return {w.quantized() ? numerics.linear_act_block : 0};
  }
  float eps() const { return static_cast<float>(config.rms_norm_eps); }
};

// The attention sub-layer of one block: u [T, D] (normed) → out [T, D]; reads and updates the
// per-sequence state of layer `layer` of every segment.
void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Step& step,
                       const Tensor& u, Tensor& out);

// The MoE sub-layer of one block: v [T, D] (normed) → out [T, D].
void moe_forward(ForwardContext& cx, const io::LayerSpec& spec, const MoeWeights& w, const Step& step, const Tensor& v,
                 Tensor& out);

}  // namespace deepinfer::model::v4
