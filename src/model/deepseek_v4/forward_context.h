// What one forward pass shares between its parts — the backend, scratch arenas, numerics, RoPE
// tables and the batch's flattened token layout — and the pieces the V4 and V4.1 forward passes
// share (internal to src/model/deepseek_v4 and src/model/deepseek_v41).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/sequence_model.h"
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
  // Window positions below this are not attended (V4.1 bounded replay runs late layers on a
  // chunk's tail only; the rows before it were never computed there).
  std::int64_t window_floor = 0;
};

struct Step {
  std::vector<Segment> segments;
  std::int64_t tokens = 0;
  Tensor ids;        // i32 [tokens] on the device
  Tensor positions;  // i32 [tokens] on the device
};

// A batch of chunks checked and flattened: the step's segments plus host ids, positions and the
// rows whose logits are wanted.
struct StepPlan {
  Step step;
  std::vector<std::int32_t> ids, positions, logit_rows;
};
// Config checks both forward passes need (K=V head, RoPE dims, hc_mult, o_groups, window, experts).
void check_shared_geometry(const io::ModelConfig& config);
// Checks chunks against the config (state, token ids, logit counts, logits shape).
StepPlan plan_step(std::span<const SequenceModel::Chunk> chunks, const io::ModelConfig& config, const Tensor& logits);
struct ForwardContext;
// Resets the pass's scratch and uploads the step's ids and positions (they outlive every layer).
void begin_step(ForwardContext& cx, StepPlan& plan);
// Advances every segment's sequence past its tokens; keeps the last `history` ids (Engram).
void finish_step(const Step& step, std::span<const std::int32_t> ids, std::size_t history);

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

// ---- Attention building blocks shared by V4 and V4.1 (attention_common.cpp) -------------------

Tensor rows_of(const Tensor& t, const Segment& s);

struct Queries {
  Tensor latent;  // [T, q_lora]: RMSNorm_q(wq_a · u), the indexer's query input
  Tensor q;       // [T, H, d], rotated at the token positions
};
// wq_a → q_norm → wq_b, the per-head unweighted RMS norm when `per_head_norm` (V4 only), RoPE.
Queries project_queries(ForwardContext& cx, const AttentionWeights& w, const Tensor& u, const Tensor& positions,
                        const ops::RopeTable& rope, bool per_head_norm);
// The SWA K=V rows [T, d]: RMSNorm_kv(wkv · u), RoPE, FP8 fake quant per the numerics (V4: NoPE
// dims, V4.1: whole row).
Tensor project_window_kv(ForwardContext& cx, const AttentionWeights& w, const Tensor& u, const Tensor& positions,
                         const ops::RopeTable& rope);
// Indexer queries [T, H_i, d_i] (rotated; Hadamard/FP4 per the numerics) and f32 head weights
// [T, H_i] carrying 1/sqrt(d_i · H_i).
struct IndexQueries {
  Tensor q;
  Tensor weights;
};
IndexQueries project_index_queries(ForwardContext& cx, const ops::LinearWeight& wq_b,
                                   const ops::LinearWeight& weights_proj, const Tensor& u, const Tensor& q_latent,
                                   const Tensor& positions);
// Rotates freshly compressed rows k [E, d] (entries first_row … first_row+E-1) at their group's
// first position, applies the QAT quantisation of compressed KV or of index keys and appends them
// to `store`.
void store_compressed(ForwardContext& cx, Tensor& k, std::int64_t first_row, int ratio, bool index_keys,
                      RowStore& store);
// Host index lists of one segment: [count, window + compressed_width]. The window part lists
// positions max(0, p-W+1, window_floor) … p, older ones from the ring (virtual rows [0, W)) and this chunk's
// from its own K=V rows ([W, W + count)); with all_visible_ratio > 0 the compressed part lists
// every entry visible at p (virtual W + count + j), else it stays -1 for a top-k to fill.
std::vector<std::int32_t> window_index_lists(const Segment& seg, std::int64_t window, std::int64_t compressed_width,
                                             int all_visible_ratio);
// Sparse attention of one segment over [ring ; its K=V rows ; compressed rows], then the ring
// keeps the segment's last `window` K=V rows.
void attend_segment_rows(ForwardContext& cx, LayerState& st, const Tensor& sinks, const Segment& seg, const Tensor& q,
                         const Tensor& kv, const Tensor& idx, const RowStore* compressed, Tensor& o);
// De-rotates o [T, H, d] at the query positions and applies the grouped output projection.
void project_output(ForwardContext& cx, const AttentionWeights& w, Tensor& o, const Tensor& positions,
                    const ops::RopeTable& rope, Tensor& out);

// The attention sub-layer of one block: u [T, D] (normed) → out [T, D]; reads and updates the
// per-sequence state of layer `layer` of every segment.
void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Step& step,
                       const Tensor& u, Tensor& out);

// The MoE sub-layer of one block: v [T, D] (normed) → out [T, D].
void moe_forward(ForwardContext& cx, const io::LayerSpec& spec, const MoeWeights& w, const Step& step, const Tensor& v,
                 Tensor& out);

}  // namespace deepinfer::model::v4
