// The V4.1 attention sub-layer (MODEL_SPEC B4.2-B4.4): queries without per-head norm, the SWA
// K=V row, and for compressed layers the CSA2 roles — a KV source feeds its compressor (ratio 2
// gated pooling / ratio 1 projection) and index keys, an index source scores the owner's running
// index-K cache (P18 decided as HF/vLLM do) and publishes its top-k, the candidate source also
// publishes its block mask, Reindex layers score only inside it, Reuse layers take the nearest
// index source's list unchanged.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"
#include "model/deepseek_v41/csa2.h"

namespace deepinfer::model::v41 {
namespace {

using v4::ForwardContext;
using v4::rows_of;
using v4::Segment;

struct Projections {
  Tensor q;       // [T, H, d]
  Tensor kv;      // [T, d]
  Tensor c_kv;    // KV source: ratio 2 f32 [T, d], ratio 1 act [T, d]
  Tensor c_gate;  // KV source, ratio 2: f32 [T, d]
  v4::IndexQueries iq;  // index sources
};

Tensor step_upload_i32(ForwardContext& cx, const std::vector<std::int32_t>& host, const Shape& shape) {
  Tensor dst = cx.step_ws.alloc(shape, DType::kI32);
  const Tensor src = Tensor::view_of(const_cast<std::int32_t*>(host.data()), shape, DType::kI32, nullptr);
  cx.backend.copy(src, dst);
  return dst;
}

// A KV source absorbs one segment: the groups it completes become latents (normed, pre-RoPE),
// whose index keys and rotated + quantised values are appended to the source's stores.
void feed_source(ForwardContext& cx, const io::LayerSpec& spec, const SourceWeights& w, v4::LayerState& st,
                 const Projections& pr, const Segment& seg) {
  const int ratio = spec.compress_ratio;
  const std::int64_t first = seg.start_pos / ratio;
  const std::int64_t emitted = (seg.start_pos + seg.count) / ratio - first;
  const std::int64_t d = w.norm.numel();
  ops::Backend& be = cx.backend;
  Tensor latent = cx.act(Shape{emitted, d});
  if (ratio > 1) {
    Tensor pooled = cx.alloc(Shape{emitted, d}, DType::kF32);
    be.compressor_update(rows_of(pr.c_kv, seg), rows_of(pr.c_gate, seg), w.ape, seg.start_pos, *st.compressor, pooled);
    if (emitted == 0) return;
    be.convert(pooled, latent);
  } else {
    be.copy(rows_of(pr.c_kv, seg), latent);
  }
  be.rms_norm(latent, &w.norm, cx.eps(), latent);
  Tensor keys = cx.act(Shape{emitted, w.k_norm.numel()});
  be.linear(latent, w.wk, cx.linear_options(w.wk), keys);
  be.rms_norm(keys, &w.k_norm, cx.eps(), keys);
  v4::store_compressed(cx, keys, first, ratio, true, *st.index_rows);
  v4::store_compressed(cx, latent, first, ratio, false, *st.kv_rows);
}

// The candidate source's block mask from its (unrestricted) scores, MODEL_SPEC B4.4: per row,
// blocks of candidate_block_size visible entries scored by their max, the newest visible entry's
// block forced in, the top candidate_topk_blocks blocks with a finite score kept.
Tensor candidate_bias(ForwardContext& cx, const Tensor& scores, const Tensor& positions, int ratio) {
  const std::int64_t rows = scores.dim(0), entries = scores.dim(1);
  Tensor host = Tensor::empty(scores.shape(), DType::kF32);
  cx.backend.copy(scores, host);
  Tensor host_pos = Tensor::empty(positions.shape(), DType::kI32);
  cx.backend.copy(positions, host_pos);
  const std::int64_t block = cx.config.candidate_block_size;
  const std::int64_t blocks = (entries + block - 1) / block;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  Tensor bias = Tensor::empty(scores.shape(), DType::kF32);
  std::vector<float> best(static_cast<std::size_t>(blocks));
  std::vector<std::int64_t> order(static_cast<std::size_t>(blocks));
  for (std::int64_t t = 0; t < rows; ++t) {
    const float* row = host.data<float>() + t * entries;
    float* out = bias.data<float>() + t * entries;
    const std::int64_t visible = std::min<std::int64_t>(entries, (host_pos.data<std::int32_t>()[t] + 1) / ratio);
    std::fill(best.begin(), best.end(), -kInf);
    for (std::int64_t s = 0; s < visible; ++s) best[static_cast<std::size_t>(s / block)] = std::max(best[static_cast<std::size_t>(s / block)], row[s]);
    if (visible > 0) best[static_cast<std::size_t>((visible - 1) / block)] = kInf;  // partly filled: always kept
    std::iota(order.begin(), order.end(), 0);
    const std::int64_t take = std::min<std::int64_t>(cx.config.candidate_topk_blocks, blocks);
    std::partial_sort(order.begin(), order.begin() + take, order.end(), [&](std::int64_t a, std::int64_t b) {
      return best[static_cast<std::size_t>(a)] > best[static_cast<std::size_t>(b)] ||
             (best[static_cast<std::size_t>(a)] == best[static_cast<std::size_t>(b)] && a < b);
    });
    std::fill(out, out + entries, -kInf);
    for (std::int64_t i = 0; i < take; ++i) {
      const std::int64_t b = order[static_cast<std::size_t>(i)];
      if (best[static_cast<std::size_t>(b)] == -kInf) continue;
      std::fill(out + b * block, out + std::min(entries, (b + 1) * block), 0.0f);
    }
  }
  Tensor dev = cx.step_ws.alloc(scores.shape(), DType::kF32);
  cx.backend.copy(bias, dev);
  return dev;
}

// The index list of an index-source layer: window part plus its top-k of the owner's entries.
Tensor select_entries(ForwardContext& cx, const io::LayerSpec& spec, const Projections& pr, const Segment& seg,
                      std::size_t s, const Tensor& positions, std::int64_t entries, bool tail, Csa2Shared& shared) {
  const std::int64_t window = cx.config.sliding_window;
  const int ratio = spec.compress_ratio;
  const std::int64_t width = std::min<std::int64_t>(cx.config.index_topk, entries);
  Tensor idx = step_upload_i32(cx, v4::window_index_lists(seg, window, width, 0), Shape{seg.count, window + width});
  if (width == 0) return idx;
  const v4::LayerState& owner = seg.state->layers[static_cast<std::size_t>(spec.kv_source_layer)];
  Tensor scores = cx.alloc(Shape{seg.count, entries}, DType::kF32);
  const Tensor seg_pos = rows_of(positions, seg);
  cx.backend.indexer_scores(rows_of(pr.iq.q, seg), owner.index_rows->view(), entries, rows_of(pr.iq.weights, seg),
                            scores);
  if (spec.candidate_source) {
    shared.candidate_bias.at(s) = candidate_bias(cx, scores, seg_pos, ratio);
  } else if (cx.config.candidate_source_layer_id >= 0 && spec.index > cx.config.candidate_source_layer_id) {
    // Index sources after the candidate source (Reindex layers) score only inside its blocks.
    const Tensor& full = shared.candidate_bias.at(s);
    DI_CHECK(full.defined(), "layer {}: no candidate mask from the candidate source for this step", spec.index);
    cx.backend.add(scores, full.narrow(0, full.dim(0) - seg.count, seg.count), scores);
  }
  Tensor picks = idx.narrow(1, window, width);
  cx.backend.topk_visible(scores, seg_pos, ratio, static_cast<int>(width), static_cast<int>(window + seg.count), picks);
  if (spec.index != shared.split_layer || tail || shared.tail_rows.empty()) return idx;
  // The split layer also lays its list out for the replayed tail (window clamped at the tail start).
  const std::int64_t keep = shared.tail_rows[s];
  if (keep == seg.count) {
    shared.tail_lists[s] = idx;
    return idx;
  }
  const std::int64_t start = seg.start_pos + seg.count - keep;
  const Segment tail_seg{seg.state, seg.offset + seg.count - keep, keep, start, start};
  Tensor tidx = step_upload_i32(cx, v4::window_index_lists(tail_seg, window, width, 0), Shape{keep, window + width});
  Tensor tail_picks = tidx.narrow(1, window, width);
  cx.backend.topk_visible(scores.narrow(0, seg.count - keep, keep), seg_pos.narrow(0, seg.count - keep, keep), ratio,
                          static_cast<int>(width), static_cast<int>(window + keep), tail_picks);
  shared.tail_lists[s] = tidx;
  return idx;
}

void attend_segment(ForwardContext& cx, const io::LayerSpec& spec, const LayerWeights& w, const Segment& seg,
                    std::size_t s, const Tensor& positions, const Projections& pr, bool tail, Csa2Shared& shared,
                    Tensor& o) {
  v4::LayerState& st = seg.state->layers[static_cast<std::size_t>(spec.index)];
  const std::int64_t window = cx.config.sliding_window;
  const int ratio = spec.compress_ratio;
  if (w.source) feed_source(cx, spec, *w.source, st, pr, seg);
  const v4::RowStore* compressed = nullptr;
  Tensor idx;
  if (ratio == 0) {
    idx = cx.upload_i32(v4::window_index_lists(seg, window, 0, 0), Shape{seg.count, window});
  } else {
    compressed = seg.state->layers[static_cast<std::size_t>(spec.kv_source_layer)].kv_rows.get();
    const std::int64_t entries = (seg.start_pos + seg.count) / ratio;
    if (spec.has_indexer) {
      idx = select_entries(cx, spec, pr, seg, s, positions, entries, tail, shared);
      shared.lists[static_cast<std::size_t>(spec.index)].at(s) = idx;
    } else {  // Reuse: the nearest index source's list, in this step's layout
      const bool from_split = tail && spec.index_source_layer <= shared.split_layer;
      idx = from_split ? shared.tail_lists.at(s)
                       : shared.lists[static_cast<std::size_t>(spec.index_source_layer)].at(s);
      DI_CHECK(idx.defined() && idx.dim(0) == seg.count, "layer {}: index source {} published no list for this step",
               spec.index, spec.index_source_layer);
    }
  }
  Tensor out = rows_of(o, seg);
  v4::attend_segment_rows(cx, st, w.block.attn.sinks, seg, rows_of(pr.q, seg), rows_of(pr.kv, seg), idx, compressed,
                          out);
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

  Tensor o = cx.act(Shape{step.tokens, c.num_heads, c.head_dim});
  for (std::size_t s = 0; s < step.segments.size(); ++s)
    attend_segment(cx, spec, w, step.segments[s], s, step.positions, pr, tail, shared, o);
  v4::project_output(cx, aw, o, step.positions, rope, out);
}

}  // namespace deepinfer::model::v41
