// The V4.1 attention sub-layer (MODEL_SPEC B4.2-B4.4): queries without per-head norm, the SWA
// K=V row, and for compressed layers the CSA2 roles — a KV source feeds its compressor (ratio 2
// gated pooling / ratio 1 projection) and index keys, an index source scores the owner's running
// index-K cache (P18 decided as HF/vLLM do) and publishes its top-k, the candidate source also
// publishes its block mask, Reindex layers score only inside it, Reuse layers take the nearest
// index source's list unchanged. Each op runs once for the whole batch (step metadata: step_meta.h).
#include <cmath>

#include "common/error.h"
#include "model/deepseek_v41/csa2.h"

namespace deepinfer::model::v41 {
namespace {

using v4::ForwardContext;
using v4::Step;

struct Projections {
  Tensor q;       // [T, H, d]
  Tensor kv;      // [T, d]
  Tensor c_kv;    // KV source: ratio 2 f32 [T, d], ratio 1 act [T, d]
  Tensor c_gate;  // KV source, ratio 2: f32 [T, d]
  v4::IndexQueries iq;  // index sources
};

// A KV source absorbs the batch: the groups its rows complete become latents (normed, pre-RoPE),
// whose index keys and rotated + quantised values go to the source's stores.
void feed_source(ForwardContext& cx, const io::LayerSpec& spec, const SourceWeights& w, const Step& step,
                 const Projections& pr) {
  const int ratio = spec.compress_ratio;
  ops::Backend& be = cx.backend;
  v4::LayerPool& pool = v4::layer_pool(step, spec.index);
  const v4::StateArena& arena = *step.segments.front().state->arena;
  Tensor latent;
  if (ratio > 1) {
    latent = v4::compress_rows(cx, step, pr.c_kv, pr.c_gate, w.ape, w.norm, *pool.compressor);
  } else {
    latent = cx.act(Shape{step.tokens, w.norm.numel()});
    be.copy(pr.c_kv, latent);
    be.rms_norm(latent, &w.norm, cx.eps(), latent);
  }
  Tensor keys = cx.act(Shape{step.tokens, w.k_norm.numel()});
  be.linear(latent, w.wk, cx.linear_options(w.wk), keys);
  be.rms_norm(keys, &w.k_norm, cx.eps(), keys);
  v4::store_compressed(cx, step, keys, ratio, true, v4::store_pool(step, arena.index_store(spec.index)));
  v4::store_compressed(cx, step, latent, ratio, false, v4::store_pool(step, arena.kv_store(spec.index)));
}

// The candidate source's block mask from its (unrestricted) scores, MODEL_SPEC B4.4 (step lifetime:
// the Reindex layers after it read it).
Tensor candidate_bias(ForwardContext& cx, const Step& step, const Tensor& scores, int ratio) {
  Tensor bias = cx.step_ws.alloc(scores.shape(), DType::kF32);
  cx.backend.candidate_mask(scores, step.positions, ratio, cx.config.candidate_block_size,
                            cx.config.candidate_topk_blocks, bias);
  return bias;
}

// Reindex layers score only inside the candidate blocks: the mask in this step's row layout.
void apply_candidates(ForwardContext& cx, const Step& step, bool tail, const Csa2Shared& shared, Tensor& scores) {
  DI_CHECK(shared.candidate_bias.defined(), "no candidate mask from the candidate source for this step");
  if (tail == shared.candidate_from_tail) {
    cx.backend.add(scores, shared.candidate_bias, scores);
    return;
  }
  Tensor bias = cx.alloc(scores.shape(), DType::kF32);  // full-step mask rows of the replayed tail
  cx.backend.gather_rows(shared.candidate_bias, step.meta->extra, bias);
  cx.backend.add(scores, bias, scores);
}

// The index list of an index-source layer [T, W + top-k] (step lifetime: Reuse layers read it):
// the window part plus its top-k of the owner's entries. The split layer also lays its list out
// for the replayed tail (window clamped at each tail's start).
Tensor select_entries(ForwardContext& cx, const io::LayerSpec& spec, const Projections& pr, const Step& step, bool tail,
                      Csa2Shared& shared) {
  const std::int64_t window = cx.config.sliding_window;
  const int ratio = spec.compress_ratio;
  const v4::RatioMeta& rm = step.meta->ratio(ratio);
  const std::int64_t width = rm.topk_width;
  Tensor idx = cx.step_ws.alloc(rm.topk_list.shape(), DType::kI32);
  cx.backend.copy(rm.topk_list, idx);
  if (width == 0) return idx;
  const v4::StateArena& arena = *step.segments.front().state->arena;
  const v4::RowPool& keys = v4::store_pool(step, arena.index_store(spec.kv_source_layer));
  Tensor scores = cx.alloc(Shape{step.tokens, rm.entries}, DType::kF32);
  cx.backend.indexer_scores(pr.iq.q, step.meta->store_view(keys), rm.key_base, rm.num_keys, pr.iq.weights, scores);
  if (spec.candidate_source) {
    shared.candidate_bias = candidate_bias(cx, step, scores, ratio);
    shared.candidate_from_tail = tail;
  } else if (cx.config.candidate_source_layer_id >= 0 && spec.index > cx.config.candidate_source_layer_id) {
    apply_candidates(cx, step, tail, shared, scores);
  }
  Tensor picks = idx.narrow(1, window, width);
  cx.backend.topk_visible(scores, step.positions, ratio, static_cast<int>(width), rm.offsets, picks);
  if (spec.index != shared.split_layer || tail || shared.tail == nullptr) return idx;
  const Step& ts = *shared.tail;
  const v4::RatioMeta& trm = ts.meta->ratio(ratio);
  Tensor tidx = cx.step_ws.alloc(trm.topk_list.shape(), DType::kI32);
  cx.backend.copy(trm.topk_list, tidx);
  Tensor tail_scores = cx.alloc(Shape{ts.tokens, rm.entries}, DType::kF32);
  cx.backend.gather_rows(scores, ts.meta->extra, tail_scores);
  Tensor tail_picks = tidx.narrow(1, window, trm.topk_width);
  cx.backend.topk_visible(tail_scores, ts.positions, ratio, static_cast<int>(trm.topk_width), trm.offsets, tail_picks);
  shared.tail_list = tidx;
  return idx;
}

}  // namespace

void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const LayerWeights& w, const v4::Step& step,
                       bool tail, Csa2Shared& shared, const Tensor& u, Tensor& out) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const ops::RopeTable& rope = spec.compress_ratio != 0 ? cx.rope_compress : cx.rope_main;
  const v4::AttentionWeights& aw = w.block.attn;
  Projections pr;
  const v4::Queries queries = v4::project_queries(cx, aw, u, step.positions, rope, false);  // no per-head norm
  pr.q = queries.q;
  pr.kv = v4::project_window_kv(cx, aw, u, step.positions, rope);
  if (w.source) {
    // Ratio 2 pools in f32 (P30); ratio 1 is a plain projection in the activation dtype.
    const bool pooled = spec.compress_ratio > 1;
    pr.c_kv = pooled ? cx.alloc(Shape{step.tokens, c.head_dim}, DType::kF32) : cx.act(Shape{step.tokens, c.head_dim});
    be.linear(u, w.source->wkv, {}, pr.c_kv);
    if (pooled) {
      pr.c_gate = cx.alloc(Shape{step.tokens, c.head_dim}, DType::kF32);
      be.linear(u, w.source->wgate, {}, pr.c_gate);
    }
  }
  if (w.index) pr.iq = v4::project_index_queries(cx, w.index->wq_b, w.index->weights_proj, u, queries.latent, step.positions);

  if (w.source) feed_source(cx, spec, *w.source, step, pr);
  const v4::RowPool* compressed = nullptr;
  Tensor idx = step.meta->window_list;
  if (spec.compress_ratio != 0) {
    const v4::StateArena& arena = *step.segments.front().state->arena;
    compressed = &v4::store_pool(step, arena.kv_store(spec.kv_source_layer));
    if (spec.has_indexer) {
      idx = select_entries(cx, spec, pr, step, tail, shared);
      shared.lists[static_cast<std::size_t>(spec.index)] = idx;
    } else {  // Reuse: the nearest index source's list, in this step's layout
      const bool from_split = tail && spec.index_source_layer <= shared.split_layer;
      idx = from_split ? shared.tail_list : shared.lists[static_cast<std::size_t>(spec.index_source_layer)];
      DI_CHECK(idx.defined() && idx.dim(0) == step.tokens, "layer {}: index source {} published no list for this step",
               spec.index, spec.index_source_layer);
    }
  }
  Tensor o = cx.act(Shape{step.tokens, c.num_heads, c.head_dim});
  v4::attend_rows(cx, step, v4::layer_pool(step, spec.index), aw.sinks, pr.q, pr.kv, idx, compressed, o);
  v4::project_output(cx, aw, o, step.positions, rope, out);
}

}  // namespace deepinfer::model::v41
