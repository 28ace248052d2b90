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
#include "model/deepseek_v4/step_meta.h"
#include "model/deepseek_v4/weights.h"
#include "ops/backend.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {

struct Step {
  std::vector<Segment> segments;
  std::int64_t tokens = 0;  // rows the ops run on (the real tokens, then any bucket padding)
  Tensor ids;               // i32 [tokens] on the device
  Tensor positions;         // i32 [tokens] on the device
  const StepMeta* meta = nullptr;
};

// A batch of chunks checked and flattened: the step's segments plus host ids, positions and the
// rows whose logits are wanted.
struct StepPlan {
  Step step;
  std::vector<std::int32_t> ids, positions, logit_rows;
  StateArena* arena = nullptr;  // the arena every chunk's sequence lives in
};
// Config checks both forward passes need (K=V head, RoPE dims, hc_mult, o_groups, window, experts).
void check_shared_geometry(const io::ModelConfig& config);
// Checks chunks against the config (state, token ids, logit counts, logits shape); gives the
// model's own sequences pages for their new tokens. `sampled_rows` > 0: ids -1 .. -sampled_rows
// are placeholders for earlier samples, resolved on the device (Model::set_sampled_ids).
StepPlan plan_step(std::span<const SequenceModel::Chunk> chunks, const io::ModelConfig& config, const Tensor& logits,
                   std::int64_t sampled_rows = 0);
// The plan's rows for the metadata layout.
StepRows step_rows(const StepPlan& plan);
struct ForwardContext;
// Resets the pass's scratch and points the step at its uploaded metadata.
void begin_step(ForwardContext& cx, Step& step, const StepMeta& meta);
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
  // Input fake-quant of a projection: only quantised weights take FP8 inputs (reference linear()).
  ops::LinearOptions linear_options(const ops::LinearWeight& w) const {
    return {w.quantized() ? numerics.linear_act_block : 0};
  }
  float eps() const { return static_cast<float>(config.rms_norm_eps); }
};

// ---- Attention building blocks shared by V4 and V4.1 (attention_common.cpp) -------------------

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
// Compressed rows k [T, d] of a batch (row t holds the group row t completes, if any) rotated at
// their group's first position, quantised as compressed KV or index keys, and written to `store`
// at the step's store rows of `ratio` (rows completing no group write nowhere).
void store_compressed(ForwardContext& cx, const Step& step, Tensor& k, int ratio, bool index_keys,
                      const RowPool& store);
// One compressor call for the whole batch: the groups its rows complete, pooled (f32 [T, d], zero
// rows elsewhere), in the activation dtype and RMS-normed with `norm`.
Tensor compress_rows(ForwardContext& cx, const Step& step, const Tensor& kv, const Tensor& score, const Tensor& ape,
                     const Tensor& norm, ops::CompressorState& state);
// Sparse attention of the batch over [rings ; this step's K=V rows ; compressed rows] with index
// lists `idx` [T, K], then every segment's ring keeps its last `window` K=V rows.
void attend_rows(ForwardContext& cx, const Step& step, LayerPool& pool, const Tensor& sinks, const Tensor& q,
                 const Tensor& kv, const Tensor& idx, const RowPool* compressed, Tensor& o);
// De-rotates o [T, H, d] at the query positions and applies the grouped output projection.
void project_output(ForwardContext& cx, const AttentionWeights& w, Tensor& o, const Tensor& positions,
                    const ops::RopeTable& rope, Tensor& out);

// The arena's pools of layer `layer` and of store `index` (index >= 0).
LayerPool& layer_pool(const Step& step, int layer);
const RowPool& store_pool(const Step& step, int index);

// The attention sub-layer of one block: u [T, D] (normed) → out [T, D]; reads and updates the
// per-sequence state of layer `layer` of every segment.
void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Step& step,
                       const Tensor& u, Tensor& out);

// The MoE sub-layer of one block: v [T, D] (normed) → out [T, D].
void moe_forward(ForwardContext& cx, const io::LayerSpec& spec, const MoeWeights& w, const Step& step, const Tensor& v,
                 Tensor& out);

}  // namespace deepinfer::model::v4
